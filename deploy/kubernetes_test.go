package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/jobs"
)

// kubeObjects reads every resource the kustomization lists, by kind and name.
func kubeObjects(t *testing.T) map[string]map[string]any {
	t.Helper()
	kust := readYAML(t, "kubernetes/kustomization.yaml")[0]
	objects := map[string]map[string]any{}
	for _, r := range list(t, kust, "resources") {
		for _, doc := range readYAML(t, filepath.Join("kubernetes", fmt.Sprint(r))) {
			kind, name := str(t, doc, "kind"), str(t, doc, "metadata", "name")
			if _, dup := objects[kind+"/"+name]; dup {
				t.Errorf("%s/%s is defined twice", kind, name)
			}
			objects[kind+"/"+name] = doc
		}
	}
	return objects
}

func object(t *testing.T, objects map[string]map[string]any, kind, name string) map[string]any {
	t.Helper()
	o, ok := objects[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s/%s among the kustomization's resources", kind, name)
	}
	return o
}

func TestKubernetesWorker(t *testing.T) {
	objects := kubeObjects(t)
	sts := object(t, objects, "StatefulSet", "la-worker")
	pod := at(t, sts, "spec", "template", "spec")
	containers := list(t, pod, "containers")
	if len(containers) != 1 {
		t.Fatalf("%d containers, want the worker alone", len(containers))
	}
	c := containers[0]

	// the configuration: one ConfigMap the container reads whole
	cmName := str(t, c, "envFrom", 0, "configMapRef", "name")
	env := stringMap(t, at(t, object(t, objects, "ConfigMap", cmName), "data"))
	for _, e := range list(t, c, "env") {
		env[str(t, e, "name")] = "(from the pod)"
	}
	checkVariables(t, "ConfigMap "+cmName, env)
	if env["LA_ENGINE"] != "ttnn" || env["LA_CHIPS"] != "1" || env["LA_WORKER_NAME"] == "" {
		t.Errorf("LA_ENGINE=%q LA_CHIPS=%q LA_WORKER_NAME=%q; want ttnn, 1, set per pod", env["LA_ENGINE"], env["LA_CHIPS"], env["LA_WORKER_NAME"])
	}

	// one chip per pod, through Tenstorrent's DRA driver
	claims := list(t, pod, "resourceClaims")
	if len(claims) != 1 {
		t.Fatalf("%d resource claims, want one chip", len(claims))
	}
	tmpl := object(t, objects, "ResourceClaimTemplate", str(t, claims[0], "resourceClaimTemplateName"))
	requests := list(t, tmpl, "spec", "spec", "devices", "requests")
	if len(requests) != 1 {
		t.Fatalf("%d device requests, want one", len(requests))
	}
	req := requests[0]
	class, count := "", 0
	if has(req, "exactly") { // resource.k8s.io/v1
		class = str(t, req, "exactly", "deviceClassName")
		count, _ = at(t, req, "exactly", "count").(int)
	} else { // v1beta1
		class = str(t, req, "deviceClassName")
		count = 1
	}
	if class != "tenstorrent.com" || count != 1 {
		t.Errorf("device request for %d of %q, want 1 of tenstorrent.com", count, class)
	}
	if got := str(t, c, "resources", "claims", 0, "name"); got != str(t, claims[0], "name") {
		t.Errorf("the container uses claim %q, the pod declares %q", got, str(t, claims[0], "name"))
	}

	// probes: start-up and liveness on /livez; readiness on /readyz, which waits for the
	// engine and NATS; all on the port the worker serves HTTP on
	for probe, path := range map[string]string{"startupProbe": "/livez", "livenessProbe": "/livez", "readinessProbe": "/readyz"} {
		if got := str(t, c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s asks %s, want %s", probe, got, path)
		}
		if port := str(t, c, probe, "httpGet", "port"); port != str(t, c, "ports", 0, "name") {
			t.Errorf("%s on port %q, want the HTTP port %q", probe, port, str(t, c, "ports", 0, "name"))
		}
	}

	// graceful termination outlasts the worker's drain
	grace, ok := at(t, pod, "terminationGracePeriodSeconds").(int)
	if !ok {
		t.Fatal("terminationGracePeriodSeconds is not a number")
	}
	if drain := workerDrain(t, env); time.Duration(grace)*time.Second <= drain {
		t.Errorf("terminationGracePeriodSeconds %d does not outlast the worker's drain %s", grace, drain)
	}

	// hugepages: a 1 GiB hugepage volume at the path tt-metal maps, requested == limited
	var hugeVolume string
	for _, v := range list(t, pod, "volumes") {
		if has(v, "emptyDir", "medium") && str(t, v, "emptyDir", "medium") == "HugePages-1Gi" {
			hugeVolume = str(t, v, "name")
		}
	}
	mounts := map[string]string{}
	for _, m := range list(t, c, "volumeMounts") {
		mounts[str(t, m, "mountPath")] = str(t, m, "name")
	}
	if hugeVolume == "" || mounts["/dev/hugepages-1G"] != hugeVolume {
		t.Errorf("no HugePages-1Gi volume mounted at /dev/hugepages-1G (mounts %v)", mounts)
	}
	if req, lim := fmt.Sprint(at(t, c, "resources", "requests", "hugepages-1Gi")), fmt.Sprint(at(t, c, "resources", "limits", "hugepages-1Gi")); req != lim {
		t.Errorf("hugepages-1Gi request %s != limit %s (Kubernetes refuses that)", req, lim)
	}
	if _, ok := mounts["/cache"]; !ok {
		t.Error("no per-pod cache volume at /cache")
	}
	for _, cache := range []string{"TT_METAL_CACHE", "TT_DIT_CACHE_DIR", "TT_CACHE_PATH", "LA_DATA_DIR", "HF_HOME"} {
		if !strings.HasPrefix(env[cache], "/cache/") {
			t.Errorf("%s=%q is not on the pod's cache volume", cache, env[cache])
		}
	}

	// ports: what the worker listens on is what the container and the services expose
	ports := map[string]string{}
	for _, p := range list(t, c, "ports") {
		ports[str(t, p, "name")] = fmt.Sprint(at(t, p, "containerPort"))
	}
	if http := httpPort(t, list(t, c, "command"), env); ports["http"] != http || ports["metrics"] != portOf(t, env["LA_METRICS_ADDR"]) {
		t.Errorf("container ports %v do not match the worker's HTTP port %s / LA_METRICS_ADDR %q", ports, http, env["LA_METRICS_ADDR"])
	}
	headless := object(t, objects, "Service", str(t, sts, "spec", "serviceName"))
	if fmt.Sprint(at(t, headless, "spec", "clusterIP")) != "None" {
		t.Error("the StatefulSet's service is not headless")
	}
	labels := stringMap(t, at(t, sts, "spec", "template", "metadata", "labels"))
	for _, svc := range []map[string]any{headless, object(t, objects, "Service", "la-predict")} {
		for k, v := range stringMap(t, at(t, svc, "spec", "selector")) {
			if labels[k] != v {
				t.Errorf("Service %s selects %s=%s, the pods carry %v", str(t, svc, "metadata", "name"), k, v, labels)
			}
		}
		for _, p := range list(t, svc, "spec", "ports") {
			if _, ok := ports[fmt.Sprint(at(t, p, "targetPort"))]; !ok {
				t.Errorf("Service %s targets port %v, which the container does not name", str(t, svc, "metadata", "name"), at(t, p, "targetPort"))
			}
		}
	}
	for k, v := range stringMap(t, at(t, sts, "spec", "selector", "matchLabels")) {
		if labels[k] != v {
			t.Errorf("StatefulSet selector %s=%s does not match its pod labels %v", k, v, labels)
		}
	}
}

func TestKubernetesScalingAndMetrics(t *testing.T) {
	objects := kubeObjects(t)
	so := object(t, objects, "ScaledObject", "la-worker")
	if kind, name := str(t, so, "spec", "scaleTargetRef", "kind"), str(t, so, "spec", "scaleTargetRef", "name"); objects[kind+"/"+name] == nil {
		t.Errorf("ScaledObject scales %s/%s, which is not defined", kind, name)
	}

	// the metric names the worker really exports
	reg := prometheus.NewRegistry()
	jobs.NewMetrics(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
	}

	types := map[string]bool{}
	for _, trig := range list(t, so, "spec", "triggers") {
		typ := str(t, trig, "type")
		types[typ] = true
		md := stringMap(t, at(t, trig, "metadata"))
		switch typ {
		case "nats-jetstream":
			if md["stream"] != jobs.JobsStream || md["consumer"] != jobs.ConsumerName {
				t.Errorf("nats-jetstream trigger watches %s/%s, the workers share %s/%s", md["stream"], md["consumer"], jobs.JobsStream, jobs.ConsumerName)
			}
			if !strings.HasSuffix(md["natsServerMonitoringEndpoint"], ":8222") || md["lagThreshold"] == "" {
				t.Errorf("nats-jetstream trigger: endpoint %q, lagThreshold %q", md["natsServerMonitoringEndpoint"], md["lagThreshold"])
			}
		case "prometheus":
			var names []string
			for name := range exported {
				if strings.Contains(md["query"], name) {
					names = append(names, name)
				}
			}
			if len(names) == 0 || md["threshold"] == "" {
				t.Errorf("prometheus trigger query %q uses none of the worker's metrics", md["query"])
			}
		}
	}
	if !types["nats-jetstream"] || !types["prometheus"] {
		t.Errorf("triggers %v: want nats-jetstream (consumer lag) and prometheus (jobs in flight)", types)
	}

	sm := object(t, objects, "ServiceMonitor", "la-worker")
	port := str(t, sm, "spec", "endpoints", 0, "port")
	found := false
	for key, o := range objects {
		if strings.HasPrefix(key, "Service/") {
			for _, p := range list(t, o, "spec", "ports") {
				found = found || str(t, p, "name") == port
			}
		}
	}
	if !found {
		t.Errorf("ServiceMonitor scrapes port %q, which no Service names", port)
	}

	scrape := readYAML(t, "kubernetes/prometheus-scrape.yaml")[0]
	if str(t, scrape, "scrape_configs", 0, "job_name") != "la-worker" {
		t.Error("prometheus-scrape.yaml: no la-worker job")
	}
}

func TestKubernetesNATSValues(t *testing.T) {
	v := readYAML(t, "kubernetes/nats-values.yaml")[0]
	if at(t, v, "config", "cluster", "enabled") != true || at(t, v, "config", "cluster", "replicas") != 3 {
		t.Errorf("NATS cluster: enabled %v, replicas %v; want a cluster of 3", at(t, v, "config", "cluster", "enabled"), at(t, v, "config", "cluster", "replicas"))
	}
	if at(t, v, "config", "jetstream", "enabled") != true || at(t, v, "config", "jetstream", "fileStore", "pvc", "enabled") != true {
		t.Error("JetStream with a persistent file store is not enabled")
	}
	objects := kubeObjects(t)
	env := stringMap(t, at(t, object(t, objects, "ConfigMap", "la-worker"), "data"))
	if env["LA_REPLICAS"] != fmt.Sprint(at(t, v, "config", "cluster", "replicas")) {
		t.Errorf("LA_REPLICAS=%q, want one stream replica per NATS node", env["LA_REPLICAS"])
	}
	monitor := fmt.Sprint(at(t, v, "config", "monitor", "port"))
	for _, trig := range list(t, object(t, objects, "ScaledObject", "la-worker"), "spec", "triggers") {
		if str(t, trig, "type") == "nats-jetstream" && !strings.HasSuffix(str(t, trig, "metadata", "natsServerMonitoringEndpoint"), ":"+monitor) {
			t.Errorf("KEDA reads NATS monitoring on %s, the chart serves it on %s", str(t, trig, "metadata", "natsServerMonitoringEndpoint"), monitor)
		}
	}
}

// Every file in kubernetes/ is either in the kustomization or documented as applied apart.
func TestKubernetesFilesAccountedFor(t *testing.T) {
	kust := readYAML(t, "kubernetes/kustomization.yaml")[0]
	listed := map[string]bool{"kustomization.yaml": true, "nats-values.yaml": true, "prometheus-scrape.yaml": true}
	for _, r := range list(t, kust, "resources") {
		listed[fmt.Sprint(r)] = true
	}
	entries, err := os.ReadDir("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !listed[e.Name()] {
			t.Errorf("kubernetes/%s is in no kustomization and not known to be applied apart", e.Name())
		}
	}
}

// KEDA's prometheus trigger asks for sum(la_jobs_held) / threshold pods, so its threshold
// must be what one busy pod holds: the Prefetch each chip's Runner gets from the ConfigMap
// (LA_PREFETCH, or the default derived from LA_MAX_BATCH) times LA_CHIPS. A smaller one
// reads one busy worker as several pods' worth of load.
func TestKEDAThresholdIsOneFullPod(t *testing.T) {
	objects := kubeObjects(t)
	env := stringMap(t, at(t, object(t, objects, "ConfigMap", "la-worker"), "data"))
	// the worker's configuration as the pod would read it: the ConfigMap and nothing of
	// this test's environment
	for _, name := range config.Names(config.Worker{}) {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var cfg config.Worker
	if err := envconfig.Process("", &cfg); err != nil {
		t.Fatalf("the ConfigMap's configuration: %v", err)
	}
	full := cfg.RunnerConfig("la-worker-0", 0).Prefetch * cfg.Engine.Chips

	found := false
	for _, trig := range list(t, object(t, objects, "ScaledObject", "la-worker"), "spec", "triggers") {
		if str(t, trig, "type") != "prometheus" {
			continue
		}
		found = true
		threshold, err := strconv.Atoi(str(t, trig, "metadata", "threshold"))
		if err != nil {
			t.Fatalf("prometheus trigger threshold: %v", err)
		}
		if threshold != full {
			t.Errorf("prometheus trigger threshold %d held jobs per pod; a busy pod holds %d (LA_PREFETCH %q x LA_CHIPS %d, LA_MAX_BATCH %d)",
				threshold, full, env["LA_PREFETCH"], cfg.Engine.Chips, cfg.Engine.MaxBatch)
		}
	}
	if !found {
		t.Error("no prometheus trigger on la_jobs_held")
	}
}
