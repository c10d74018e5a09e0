//go:build unix

package storage_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locateanything/detect/storage"
)

// mkfifo makes a named pipe at p. Opening it for reading blocks until a writer comes, so
// a Store that opens before it checks the type hangs on it.
func mkfifo(t *testing.T, p string) {
	t.Helper()
	mkdir(t, filepath.Dir(p))
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatalf("mkfifo %s: %v", p, err)
	}
	// A reader stuck in open(2) is let go by a writer opening the pipe, so a failing test
	// does not leave a goroutine blocked for good.
	t.Cleanup(func() {
		if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
}

// mksocket binds a Unix socket at p (closed when the test ends).
func mksocket(t *testing.T, p string) {
	t.Helper()
	mkdir(t, filepath.Dir(p))
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatalf("listen on %s: %v", p, err)
	}
	t.Cleanup(func() { l.Close() })
}

// returnsSoon runs fn and fails the test if it has not returned after a few seconds.
func returnsSoon(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still blocked after 5 s", what)
	}
}

// TestFileSpecialFilesAreRefusedWithoutBlocking: a FIFO, a socket or a device as an image
// (or as an output) is refused at once with ErrNotAllowed and a reason naming the kind of
// file; nothing blocks and nothing is written into it.
func TestFileSpecialFilesAreRefusedWithoutBlocking(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	mkfifo(t, filepath.Join(f.root, "in/pipe.jpg"))
	mksocket(t, filepath.Join(f.root, "in/sock.jpg"))
	symlink(t, "pipe.jpg", filepath.Join(f.root, "in/link-to-pipe.jpg"))
	symlink(t, filepath.Join(f.root, "in/pipe.jpg"), filepath.Join(f.root, "in/abs-link-to-pipe.jpg"))

	cases := map[string]string{
		f.url("in/pipe.jpg"):              "named pipe",
		f.url("in/sock.jpg"):              "socket",
		f.url("in/link-to-pipe.jpg"):      "named pipe",
		f.url("in/abs-link-to-pipe.jpg"):  "named pipe",
		f.url("in/pipe.jpg/results.json"): "", // a path through a pipe: no folder there
	}
	for u, kind := range cases {
		returnsSoon(t, "Get "+u, func() {
			_, err := f.store.Get(ctx, u, 0)
			if err == nil || !storage.Permanent(err) {
				t.Errorf("Get %s: %v; want a permanent refusal", u, err)
			} else if kind != "" && (!errors.Is(err, storage.ErrNotAllowed) || !strings.Contains(err.Error(), kind)) {
				t.Errorf("Get %s: %v; want ErrNotAllowed naming a %s", u, err, kind)
			}
		})
		returnsSoon(t, "Stat "+u, func() {
			if _, err := f.store.Stat(ctx, u); err == nil || !storage.Permanent(err) {
				t.Errorf("Stat %s: %v; want a permanent refusal", u, err)
			}
		})
		returnsSoon(t, "Put "+u, func() {
			err := f.store.Put(ctx, u, []byte(`{"written": true}`), "application/json")
			if err == nil || !storage.Permanent(err) {
				t.Errorf("Put %s: %v; want a permanent refusal", u, err)
			}
		})
	}
	info, err := os.Lstat(filepath.Join(f.root, "in/pipe.jpg"))
	if err != nil || info.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe was replaced: %v %v", info, err)
	}
	var listed []string
	returnsSoon(t, "List", func() {
		err := f.store.List(ctx, f.url("in")+"/", func(o storage.Object) bool {
			listed = append(listed, o.URL)
			return true
		})
		if err != nil {
			t.Errorf("List: %v", err)
		}
	})
	if len(listed) != 0 {
		t.Errorf("List shows %q; want no pipes or sockets", listed)
	}
}

// TestFileDevicesAreRefused: a character device is not read, not even /dev/zero, which
// would never end (here under a root that names /dev itself, the only way one is
// reachable), and not written: a Put leaves a device node in place (one made in a
// temporary root, which needs root privileges).
func TestFileDevicesAreRefused(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skipf("no /dev/zero: %v", err)
	}
	store := openRouter(t, storage.Config{FileRoots: []string{"/dev"}})
	ctx := context.Background()
	for _, u := range []string{"file:///dev/zero", "file:///dev/null"} {
		returnsSoon(t, "Get "+u, func() {
			_, err := store.Get(ctx, u, 0)
			if !errors.Is(err, storage.ErrNotAllowed) || !strings.Contains(err.Error(), "device") {
				t.Errorf("Get %s: %v; want ErrNotAllowed naming a device", u, err)
			}
		})
		if _, err := store.Stat(ctx, u); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Stat %s: %v; want ErrNotAllowed", u, err)
		}
	}

	f := newFileFixture(t)
	node := filepath.Join(f.root, "null.json")
	if err := syscall.Mknod(node, syscall.S_IFCHR|0o666, 1<<8|3); err != nil { // 1,3 is /dev/null
		t.Skipf("cannot make a device node here (needs root): %v", err)
	}
	if err := f.store.Put(ctx, f.url("null.json"), []byte("x"), ""); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("Put onto a device: %v; want ErrNotAllowed", err)
	}
	if info, err := os.Lstat(node); err != nil || info.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("the device node was replaced: %v %v", info, err)
	}
}
