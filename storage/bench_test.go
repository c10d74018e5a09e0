package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/locateanything/detect/storage"
)

// BenchmarkGet reads a 114 kB JPEG through each backend (versitygw on loopback for s3://),
// the per-job fetch cost a worker pays.
func BenchmarkGet(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "person.jpg"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("s3", func(b *testing.B) {
		_, store := openS3(b)
		const u = "s3://images/person.jpg"
		if err := store.Put(ctx, u, data, "image/jpeg"); err != nil {
			b.Fatal(err)
		}
		benchGet(b, store, u, len(data))
	})
	b.Run("file", func(b *testing.B) {
		root := b.TempDir()
		store := openRouter(b, storage.Config{FileRoots: []string{root}})
		u := "file://" + filepath.Join(root, "person.jpg")
		if err := store.Put(ctx, u, data, "image/jpeg"); err != nil {
			b.Fatal(err)
		}
		benchGet(b, store, u, len(data))
	})
}

func benchGet(b *testing.B, store *storage.Router, u string, size int) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := store.Get(context.Background(), u, 0); err != nil {
			b.Fatal(err)
		}
	}
}
