package deploy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsembed"
)

// rolePasswords are the passwords the NATS configs read from the environment, by user.
var rolePasswords = map[string][2]string{ // user: variable, test value
	"la-worker":   {"NATS_WORKER_PASSWORD", "pw-worker-test"},
	"la-producer": {"NATS_PRODUCER_PASSWORD", "pw-producer-test"},
	"la-operator": {"NATS_OPERATOR_PASSWORD", "pw-operator-test"},
}

// roleOf is the role each shipped user has.
var roleOf = map[string]natsembed.Role{
	"la-worker": natsembed.RoleWorker, "la-producer": natsembed.RoleProducer, "la-operator": natsembed.RoleOperator,
}

func setRolePasswords(t *testing.T) {
	for _, v := range rolePasswords {
		t.Setenv(v[0], v[1])
	}
}

// samePermissions fails unless got grants what role's permissions grant, no more, no less.
func samePermissions(t *testing.T, where string, role natsembed.Role, gotPub, gotSub []string) {
	t.Helper()
	want := role.Permissions()
	if want == nil {
		if len(gotPub) > 0 || len(gotSub) > 0 {
			t.Errorf("%s: the %s is restricted; it may do anything", where, role)
		}
		return
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{{"publish", gotPub, want.Publish.Allow}, {"subscribe", gotSub, want.Subscribe.Allow}} {
		got, want := slices.Sorted(slices.Values(c.got)), slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s: the %s may %s %v; the embedded server's %s role (jobs/natsembed/roles.go) %v", where, role, c.what, got, role, want)
		}
	}
}

// TestComposeNATSRoles: every node of the compose cluster defines the embedded server's
// roles, with the same permissions and passwords from the environment, and the workers
// connect as the worker role.
func TestComposeNATSRoles(t *testing.T) {
	setRolePasswords(t)
	for _, conf := range []string{"compose/nats/nats-1.conf", "compose/nats/nats-2.conf", "compose/nats/nats-3.conf"} {
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("%s: %v", conf, err)
		}
		if len(opts.Users) != len(roleOf) {
			t.Errorf("%s: %d users, want %d (one per role)", conf, len(opts.Users), len(roleOf))
		}
		for _, u := range opts.Users {
			role, ok := roleOf[u.Username]
			if !ok {
				t.Errorf("%s: user %s has no role", conf, u.Username)
				continue
			}
			if u.Password != rolePasswords[u.Username][1] {
				t.Errorf("%s: %s's password is not taken from $%s", conf, u.Username, rolePasswords[u.Username][0])
			}
			var pub, sub []string
			if u.Permissions != nil {
				if u.Permissions.Publish != nil {
					pub = u.Permissions.Publish.Allow
				}
				if u.Permissions.Subscribe != nil {
					sub = u.Permissions.Subscribe.Allow
				}
			}
			samePermissions(t, conf+" "+u.Username, role, pub, sub)
		}
	}
	doc := readYAML(t, composeFile)[0]
	for name, svc := range at(t, doc, "services").(map[string]any) {
		env := stringMap(t, at(t, svc, "environment"))
		switch {
		case strings.HasPrefix(name, "nats-"):
			for _, v := range rolePasswords {
				if !strings.Contains(env[v[0]], "${"+v[0]) {
					t.Errorf("service %s does not take %s from .env", name, v[0])
				}
			}
		case has(svc, "devices"):
			if env["LA_NATS_USER"] != "la-worker" || !strings.Contains(env["LA_NATS_PASSWORD"], "${NATS_WORKER_PASSWORD") {
				t.Errorf("service %s connects as %q with password %q; want la-worker and ${NATS_WORKER_PASSWORD}", name, env["LA_NATS_USER"], env["LA_NATS_PASSWORD"])
			}
		}
	}
}

// TestComposeNATSRolesWork runs a server from nats-1.conf (on a free port, alone) and
// checks the roles in practice: the worker creates the topology, a producer publishes a
// job but cannot delete a stream or write a job's state, the operator can.
func TestComposeNATSRolesWork(t *testing.T) {
	setRolePasswords(t)
	opts, err := server.ProcessConfigFile("compose/nats/nats-1.conf")
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", server.RANDOM_PORT, 0
	opts.Cluster, opts.Routes = server.ClusterOpts{}, nil
	opts.StoreDir, opts.NoSigs, opts.NoLog = t.TempDir(), true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	connect := func(user string, opts ...nats.Option) jetstream.JetStream {
		nc, err := nats.Connect(srv.ClientURL(), append(opts, nats.UserInfo(user, rolePasswords[user][1]),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	var cfg config.Worker
	if err := envconfig.Process("", &cfg); err != nil {
		t.Fatal(err)
	}
	worker := connect("la-worker", nats.CustomInboxPrefix(natsembed.WorkerInboxPrefix))
	if _, err := jobs.EnsureTopology(t.Context(), worker, cfg.Topology); err != nil {
		t.Fatalf("la-worker: the topology: %v", err)
	}
	producer := connect("la-producer")
	if _, err := producer.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), []byte(`{}`)); err != nil {
		t.Errorf("la-producer: publish a job: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := producer.DeleteStream(ctx, jobs.JobsStream); err == nil {
		t.Error("la-producer deleted LA_JOBS")
	}
	kv, err := producer.KeyValue(t.Context(), jobs.StateBucket)
	if err != nil {
		t.Fatalf("la-producer: the state bucket: %v", err)
	}
	if _, err := kv.Put(ctx, "kvsquat-1", []byte(`{"status":"succeeded"}`)); err == nil {
		t.Error("la-producer wrote a job's state")
	}
	if err := producer.Conn().LastError(); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("la-producer: last error %v, want a permissions violation", err)
	}
	if err := connect("la-operator").DeleteStream(t.Context(), jobs.DLQStream); err != nil {
		t.Errorf("la-operator: delete LA_DLQ: %v", err)
	}
}

// TestKubernetesNATSRoles: the Helm values define the same roles, their passwords come
// from the Secret the workers read theirs from, and the workers connect as la-worker.
func TestKubernetesNATSRoles(t *testing.T) {
	v := readYAML(t, "kubernetes/nats-values.yaml")[0]
	users := list(t, v, "config", "merge", "authorization", "users")
	if len(users) != len(roleOf) {
		t.Errorf("%d users, want %d (one per role)", len(users), len(roleOf))
	}
	// strs is the list of strings at path, nil when there is none.
	strs := func(path ...any) []string {
		var cur any = v
		for _, p := range path {
			switch key := p.(type) {
			case string:
				m, _ := cur.(map[string]any)
				cur = m[key]
			case int:
				l, _ := cur.([]any)
				if key >= len(l) {
					return nil
				}
				cur = l[key]
			}
		}
		var out []string
		l, _ := cur.([]any)
		for _, s := range l {
			out = append(out, fmt.Sprint(s))
		}
		return out
	}
	for i, u := range users {
		name := str(t, u, "user")
		role, ok := roleOf[name]
		if !ok {
			t.Errorf("user %s has no role", name)
			continue
		}
		if want := "<< $" + rolePasswords[name][0] + " >>"; str(t, u, "password") != want {
			t.Errorf("%s's password is %q, want %q", name, str(t, u, "password"), want)
		}
		base := []any{"config", "merge", "authorization", "users", i, "permissions"}
		samePermissions(t, "nats-values.yaml "+name, role,
			strs(append(base, "publish", "allow")...), strs(append(base, "subscribe", "allow")...))
		secret := at(t, v, "container", "env", rolePasswords[name][0], "valueFrom", "secretKeyRef")
		if str(t, secret, "name") != "la-nats" {
			t.Errorf("$%s does not come from the Secret la-nats", rolePasswords[name][0])
		}
		if name == "la-worker" {
			workerSecret := str(t, secret, "key")
			objects := kubeObjects(t)
			env := stringMap(t, at(t, object(t, objects, "ConfigMap", "la-worker"), "data"))
			if env["LA_NATS_USER"] != "la-worker" {
				t.Errorf("the workers connect as %q, want la-worker", env["LA_NATS_USER"])
			}
			found := false
			for _, e := range list(t, object(t, objects, "StatefulSet", "la-worker"), "spec", "template", "spec", "containers", 0, "env") {
				if str(t, e, "name") == "LA_NATS_PASSWORD" {
					found = str(t, e, "valueFrom", "secretKeyRef", "name") == "la-nats" &&
						str(t, e, "valueFrom", "secretKeyRef", "key") == workerSecret
				}
			}
			if !found {
				t.Errorf("the workers' LA_NATS_PASSWORD is not la-nats's %s", workerSecret)
			}
		}
	}
}
