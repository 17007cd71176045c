package kubernetes

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// manifest is daemonset.yaml, each document decoded strictly (an unknown
// or misspelt field, or a value of the wrong type, is an error) into the
// type its apiVersion and kind name.
type manifest struct {
	namespace *corev1.Namespace
	ds        *appsv1.DaemonSet
}

func here() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

func loadManifest(t *testing.T) manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(here(), "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("document %d: %v", i+1, err)
		}
		var err error
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Namespace":
			m.namespace = &corev1.Namespace{}
			err = yaml.UnmarshalStrict(doc, m.namespace)
		case "apps/v1 DaemonSet":
			m.ds = &appsv1.DaemonSet{}
			err = yaml.UnmarshalStrict(doc, m.ds)
		default:
			t.Fatalf("document %d: %s %s, not a kind this test knows", i+1, tm.APIVersion, tm.Kind)
		}
		if err != nil {
			t.Fatalf("document %d (%s): %v", i+1, tm.Kind, err)
		}
	}
	if m.namespace == nil || m.ds == nil {
		t.Fatal("daemonset.yaml: want a Namespace and a DaemonSet")
	}
	return m
}

// agent is the DaemonSet's one container.
func (m manifest) agent(t *testing.T) *corev1.Container {
	t.Helper()
	if n := len(m.ds.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("the DaemonSet has %d containers, want the agent's alone", n)
	}
	return &m.ds.Spec.Template.Spec.Containers[0]
}

// unit reads the systemd unit's settings: name -> values, in order.
func unit(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(here(), "..", "..", "agent", "vgpu-probe-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	set := map[string][]string{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		l := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			set[k] = append(set[k], v)
		}
	}
	return set
}

// The manifest is what the Kubernetes API accepts: names, labels and the
// selector valid, the selector matching the pod template, ports and
// quantities well formed.
func TestManifestAPIValid(t *testing.T) {
	m := loadManifest(t)
	ds := m.ds
	for _, name := range []string{m.namespace.Name, ds.Name, ds.Namespace} {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("name %q: %v", name, errs)
		}
	}
	if ds.Namespace != m.namespace.Name {
		t.Errorf("the DaemonSet is in namespace %q, the manifest makes %q", ds.Namespace, m.namespace.Name)
	}
	for _, l := range []map[string]string{ds.Labels, ds.Spec.Template.Labels} {
		for k, v := range l {
			if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
				t.Errorf("label %s=%s: %v", k, v, errs)
			}
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() {
		t.Fatalf("selector %v: %v (empty: a DaemonSet needs one)", ds.Spec.Selector, err)
	}
	if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("selector %s does not match the pod template's labels %v: the API refuses it", sel, ds.Spec.Template.Labels)
	}
	c := m.agent(t)
	if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
		t.Errorf("container name %q: %v", c.Name, errs)
	}
	for _, p := range c.Ports {
		if errs := append(validation.IsValidPortNum(int(p.ContainerPort)), validation.IsValidPortName(p.Name)...); len(errs) > 0 {
			t.Errorf("port %s %d: %v", p.Name, p.ContainerPort, errs)
		}
	}
	vols := map[string]bool{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		vols[v.Name] = true
		if v.HostPath == nil || !filepath.IsAbs(v.HostPath.Path) {
			t.Errorf("volume %s: want a hostPath with an absolute path", v.Name)
		}
	}
	for _, vm := range c.VolumeMounts {
		if !vols[vm.Name] {
			t.Errorf("volume mount %s names no volume", vm.Name)
		}
	}
}

// The container runs as the unit does: root in the host's PID namespace,
// not privileged, with exactly the unit's capabilities, its memory limit,
// its directory as a host path, and the image of this version.
func TestManifestMatchesUnit(t *testing.T) {
	m := loadManifest(t)
	u := unit(t)
	spec := m.ds.Spec.Template.Spec
	c := m.agent(t)
	if !spec.HostPID {
		t.Error("hostPID is off: the agent would see only its own container's processes, no VM")
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext.capabilities")
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Error("privileged is not set false")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop = %v, want [ALL]", sc.Capabilities.Drop)
	}
	var want []string
	for _, c := range u["CapabilityBoundingSet"] {
		for _, f := range strings.Fields(c) {
			want = append(want, strings.TrimPrefix(f, "CAP_"))
		}
	}
	var got []string
	for _, c := range sc.Capabilities.Add {
		got = append(got, string(c))
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("capabilities.add = %v, the unit's CapabilityBoundingSet = %v", got, want)
	}
	if len(u["MemoryMax"]) != 1 {
		t.Fatalf("the unit's MemoryMax: %v", u["MemoryMax"])
	}
	unitMem, err := systemdBytes(u["MemoryMax"][0])
	if err != nil {
		t.Fatal(err)
	}
	if lim, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok || lim.Value() != unitMem {
		t.Errorf("memory limit %v, the unit's MemoryMax is %d bytes", lim.String(), unitMem)
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("a CPU limit: the unit has none (CPUWeight only), and a limit would throttle the trace windows")
	}
	if req := c.Resources.Requests[corev1.ResourceMemory]; req.Cmp(c.Resources.Limits[corev1.ResourceMemory]) > 0 {
		t.Errorf("memory request %s above the limit", req.String())
	}
	// The unit's RuntimeDirectory (the state and the hint pages) is the
	// host's directory mounted at the same path.
	run := "/run/" + strings.Fields(u["RuntimeDirectory"][0])[0]
	mounted := false
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && vm.MountPath == run && v.HostPath != nil && v.HostPath.Path == run && !vm.ReadOnly {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("the host's %s is not mounted read-write at %s", run, run)
	}
	// The metrics port: the one --listen names, the container port named
	// metrics, and the scrape annotation.
	listen := ""
	for i, a := range c.Args {
		if a == "--listen" && i+1 < len(c.Args) {
			listen = c.Args[i+1]
		}
	}
	_, port, _ := strings.Cut(listen, ":")
	var metrics int32
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			metrics = p.ContainerPort
		}
	}
	ann := m.ds.Spec.Template.Annotations
	if port == "" || port != strconv.Itoa(int(metrics)) || ann["prometheus.io/port"] != port || ann["prometheus.io/scrape"] != "true" {
		t.Errorf("--listen %q, container port metrics %d, annotations %v: want one port, scraped", listen, metrics, ann)
	}
	version, err := os.ReadFile(filepath.Join(here(), "..", "..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "vgpu-probe-agent:" + strings.TrimSpace(string(version)); c.Image != want && !strings.HasSuffix(c.Image, "/"+want) {
		t.Errorf("image %q, want %s (make image's name and the VERSION file's tag)", c.Image, want)
	}
}

// systemdBytes reads a systemd size (1024-based K, M, G, T suffixes).
func systemdBytes(s string) (int64, error) {
	mult := map[byte]int64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}
	n, m := s, int64(1)
	if len(s) > 0 && mult[s[len(s)-1]] != 0 {
		n, m = s[:len(s)-1], mult[s[len(s)-1]]
	}
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("systemd size %q: %v", s, err)
	}
	return v * m, nil
}
