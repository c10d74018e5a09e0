package deploy

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

const composeFile = "compose/docker-compose.yml"

var chipDeviceRE = regexp.MustCompile(`^/dev/tenstorrent/(\d+):/dev/tenstorrent/(\d+)$`)

func TestComposeWorkersOnePerChip(t *testing.T) {
	doc := readYAML(t, composeFile)[0]
	services := at(t, doc, "services").(map[string]any)

	var workers []string
	for name, svc := range services {
		if has(svc, "devices") {
			workers = append(workers, name)
		}
		if has(svc, "build") {
			t.Errorf("service %s has a build section: the compose file only runs pulled images", name)
		}
	}
	sort.Strings(workers)
	if len(workers) == 0 {
		t.Fatal("no worker services (services with devices)")
	}

	chips := map[string]string{}
	caches := map[string]string{}
	hostPorts := map[string]string{}
	for _, name := range workers {
		svc := services[name]
		where := "service " + name

		devices := list(t, svc, "devices")
		if len(devices) != 1 {
			t.Errorf("%s: %d devices, want exactly one chip", where, len(devices))
			continue
		}
		g := chipDeviceRE.FindStringSubmatch(fmt.Sprint(devices[0]))
		if g == nil || g[1] != g[2] {
			t.Errorf("%s: device %v, want /dev/tenstorrent/N:/dev/tenstorrent/N", where, devices[0])
			continue
		}
		chip := g[1]
		if other, dup := chips[chip]; dup {
			t.Errorf("%s and %s both drive chip %s", where, other, chip)
		}
		chips[chip] = name

		env := stringMap(t, at(t, svc, "environment"))
		if env["TT_METAL_VISIBLE_DEVICES"] != chip {
			t.Errorf("%s: TT_METAL_VISIBLE_DEVICES=%q, want the chip it maps, %s", where, env["TT_METAL_VISIBLE_DEVICES"], chip)
		}
		if env["LA_ENGINE"] != "ttnn" || env["LA_CHIPS"] != "1" {
			t.Errorf("%s: LA_ENGINE=%q LA_CHIPS=%q, want ttnn and 1", where, env["LA_ENGINE"], env["LA_CHIPS"])
		}
		if env["LA_WORKER_NAME"] == "" {
			t.Errorf("%s: no LA_WORKER_NAME (results and logs would carry a container id)", where)
		}
		checkVariables(t, where, env)

		if str(t, svc, "ipc") != "host" {
			t.Errorf("%s: ipc %q, want host", where, str(t, svc, "ipc"))
		}
		grace, err := time.ParseDuration(str(t, svc, "stop_grace_period"))
		if err != nil {
			t.Fatalf("%s: stop_grace_period: %v", where, err)
		}
		if drain := workerDrain(t, env); grace <= drain {
			t.Errorf("%s: stop_grace_period %s does not outlast the worker's drain %s", where, grace, drain)
		}

		var hugepages bool
		var cache string
		for _, v := range list(t, svc, "volumes") {
			src, dst, _ := strings.Cut(fmt.Sprint(v), ":")
			switch {
			case strings.HasPrefix(dst, "/dev/hugepages-1G"):
				hugepages = src == "/dev/hugepages-1G"
			case dst == "/cache":
				cache = src
			}
		}
		if !hugepages {
			t.Errorf("%s: /dev/hugepages-1G is not mounted", where)
		}
		if cache == "" {
			t.Errorf("%s: no cache volume at /cache", where)
		} else if other, dup := caches[cache]; dup {
			t.Errorf("%s and %s share the cache volume %s; caches are per chip", where, other, cache)
		} else {
			caches[cache] = name
			if !has(doc, "volumes", cache) {
				t.Errorf("%s: cache volume %s is not declared under volumes:", where, cache)
			}
		}
		for _, cache := range []string{"TT_METAL_CACHE", "TT_DIT_CACHE_DIR", "TT_CACHE_PATH", "LA_DATA_DIR"} {
			if !strings.HasPrefix(env[cache], "/cache/") {
				t.Errorf("%s: %s=%q is not on the chip's cache volume", where, cache, env[cache])
			}
		}
		published := map[string]bool{}
		for _, p := range list(t, svc, "ports") {
			parts := strings.Split(fmt.Sprint(p), ":")
			published[parts[len(parts)-1]] = true
			host := strings.Join(parts[:len(parts)-1], ":")
			if other, dup := hostPorts[host]; dup {
				t.Errorf("%s and %s both publish %s", where, other, host)
			}
			hostPorts[host] = name
		}

		if http := httpPort(t, list(t, svc, "entrypoint"), env); !published[http] {
			t.Errorf("%s: the worker serves HTTP on %s, which is not published", where, http)
		}
		if metrics := portOf(t, env["LA_METRICS_ADDR"]); !published[metrics] {
			t.Errorf("%s: metrics on %s are not published", where, metrics)
		}

		// the S3 endpoint is the MinIO service of this file
		if !strings.Contains(env["LA_S3_ENDPOINT"], "//minio:") || !has(services, "minio") {
			t.Errorf("%s: LA_S3_ENDPOINT %q is not this file's minio service", where, env["LA_S3_ENDPOINT"])
		}
	}
}

// The NATS nodes form one cluster: each config names the other nodes as routes, JetStream
// is on with its store on the node's volume, and the workers connect to every node.
func TestComposeNATSCluster(t *testing.T) {
	setRolePasswords(t)
	doc := readYAML(t, composeFile)[0]
	services := at(t, doc, "services").(map[string]any)

	type node struct {
		service string
		opts    *server.Options
	}
	var nodes []node
	for name, svc := range services {
		if !strings.HasPrefix(name, "nats-") {
			continue
		}
		var conf, store string
		for _, v := range list(t, svc, "volumes") {
			src, dst, _ := strings.Cut(fmt.Sprint(v), ":")
			switch {
			case strings.HasPrefix(dst, "/etc/nats/nats.conf"):
				conf = filepath.Join("compose", src)
			case dst == "/data":
				store = src
			}
		}
		if conf == "" || store == "" {
			t.Fatalf("service %s: want its config file at /etc/nats/nats.conf and a volume at /data", name)
		}
		if cmd := fmt.Sprint(at(t, svc, "command")); !strings.Contains(cmd, "/etc/nats/nats.conf") {
			t.Errorf("service %s does not start with its config file (command %s)", name, cmd)
		}
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("service %s: %s: %v", name, conf, err)
		}
		if !opts.JetStream || opts.StoreDir != "/data" {
			t.Errorf("%s: JetStream %v with store %q, want on with its store on the /data volume", conf, opts.JetStream, opts.StoreDir)
		}
		if opts.Port != 4222 || opts.HTTPPort != 8222 {
			t.Errorf("%s: client port %d, monitoring %d; want 4222 and 8222", conf, opts.Port, opts.HTTPPort)
		}
		nodes = append(nodes, node{name, opts})
	}
	if len(nodes) != 3 {
		t.Fatalf("%d NATS services, want a cluster of 3", len(nodes))
	}

	names := map[string]bool{}
	for _, n := range nodes {
		if names[n.opts.ServerName] {
			t.Errorf("server_name %q is used twice", n.opts.ServerName)
		}
		names[n.opts.ServerName] = true
		if n.opts.Cluster.Name != nodes[0].opts.Cluster.Name {
			t.Errorf("%s: cluster name %q, %s says %q", n.service, n.opts.Cluster.Name, nodes[0].service, nodes[0].opts.Cluster.Name)
		}
		var routes []string
		for _, r := range n.opts.Routes {
			routes = append(routes, r.Host)
		}
		var want []string
		for _, peer := range nodes {
			if peer.service != n.service {
				want = append(want, fmt.Sprintf("%s:%d", peer.service, peer.opts.Cluster.Port))
			}
		}
		sort.Strings(routes)
		sort.Strings(want)
		if strings.Join(routes, ",") != strings.Join(want, ",") {
			t.Errorf("%s routes to %v, want its peers %v", n.service, routes, want)
		}
	}

	for name, svc := range services {
		if !has(svc, "devices") {
			continue
		}
		env := stringMap(t, at(t, svc, "environment"))
		var want []string
		for _, n := range nodes {
			want = append(want, fmt.Sprintf("nats://%s:%d", n.service, n.opts.Port))
		}
		got := strings.Split(env["LA_NATS_URL"], ",")
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("service %s: LA_NATS_URL %q, want every node: %v", name, env["LA_NATS_URL"], want)
		}
		if env["LA_REPLICAS"] != fmt.Sprint(len(nodes)) {
			t.Errorf("service %s: LA_REPLICAS=%q, want %d (one copy of each stream per node)", name, env["LA_REPLICAS"], len(nodes))
		}
	}
}

// The tt-model manifest's serve.env is checked the same way as the deployment files.
func TestManifestVariables(t *testing.T) {
	m := readYAML(t, "../tt-model.yaml")[0]
	env := stringMap(t, at(t, m, "serve", "env"))
	checkVariables(t, "tt-model.yaml serve.env", env)
	if drain := workerDrain(t, env); drain >= 120*time.Second {
		t.Errorf("the worker's drain %s does not fit the 120 s `tt-model stop` allows", drain)
	}
}
