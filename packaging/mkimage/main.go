// Command mkimage builds the agent's OCI image (`make image`) without a
// container daemon, with go-containerregistry: one layer on an empty base
// holding the vgpu-probe binary, the shared libraries it links (glibc's,
// from the build machine, found from the binary's ELF headers), and an
// /etc/passwd and /etc/group naming root and nobody. The binary is a cgo
// build (the NVML sampler), so a static-only base (scratch alone,
// distroless/static) would not run it. The result is an OCI image layout
// in a tar archive (`podman load -i FILE`, `skopeo copy oci-archive:FILE ...`).
//
//	mkimage -binary vgpu-probe -version 0.9.0 -out build/pkg/vgpu-probe-agent-0.9.0.oci.tar
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Name is the image's name in the archive (its ref.name annotation).
const Name = "vgpu-probe-agent"

// libDirs are where the dynamic loader of a Debian or Red Hat system
// finds a DT_NEEDED library without a cache.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

func main() {
	binary := flag.String("binary", "vgpu-probe", "the vgpu-probe binary to put in the image")
	version := flag.String("version", "", "the image's version (the VERSION file's), its tag")
	out := flag.String("out", "", "the OCI archive to write")
	flag.Parse()
	if err := run(*binary, *version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(binary, version, out string) error {
	if version == "" || out == "" {
		return fmt.Errorf("-version and -out are required")
	}
	files, err := closure(binary)
	if err != nil {
		return err
	}
	// The build's date, so a rebuild from the same commit is the same image.
	mtime := time.Unix(0, 0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: %v", s, err)
		}
		mtime = time.Unix(n, 0)
	}
	layerTar, err := rootfs(files, mtime)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer:     layer,
		History:   v1.History{CreatedBy: "vgpu-probe mkimage", Created: v1.Time{Time: mtime}},
		MediaType: types.OCILayer,
	})
	if err != nil {
		return err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	labels := map[string]string{
		"org.opencontainers.image.title":   Name,
		"org.opencontainers.image.version": version,
		"org.opencontainers.image.source":  "https://github.com/vgpu-probe/vgpu-probe",
		"org.opencontainers.image.description": "vgpu-probe host agent: vCPU discontinuity of every VM (eBPF), for Prometheus; " +
			"run it as packaging/kubernetes/daemonset.yaml does (host PID namespace, CAP_BPF and CAP_PERFMON)",
	}
	img, err = mutate.Config(img, v1.Config{
		// The agent's flags come from the pod (or podman run) as
		// arguments; with none it watches every VM on the host.
		Entrypoint:   []string{"/usr/bin/vgpu-probe", "agent"},
		Cmd:          []string{"--discover", "--listen", "0.0.0.0:9477"},
		ExposedPorts: map[string]struct{}{"9477/tcp": {}},
		Env:          []string{"PATH=/usr/bin"},
		Labels:       labels,
		User:         "0",
	})
	if err != nil {
		return err
	}
	img, err = mutate.CreatedAt(img, v1.Time{Time: mtime})
	if err != nil {
		return err
	}
	return writeArchive(img, Name+":"+version, out)
}

// closure is the binary and every library it needs, loader first, each
// as the path the image holds it at and the host file it comes from.
func closure(binary string) (map[string]string, error) {
	files := map[string]string{"/usr/bin/vgpu-probe": binary}
	f, err := elf.Open(binary)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", binary, err)
	}
	defer f.Close()
	if interp := f.Section(".interp"); interp != nil {
		b, err := interp.Data()
		if err != nil {
			return nil, err
		}
		p := string(bytes.TrimRight(b, "\x00"))
		files[p] = p
	}
	todo, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", binary, err)
	}
	seen := map[string]bool{}
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		path := ""
		for _, d := range libDirs {
			if _, err := os.Stat(filepath.Join(d, name)); err == nil {
				path = filepath.Join(d, name)
				break
			}
		}
		if path == "" {
			return nil, fmt.Errorf("%s needs %s, found in none of %v", binary, name, libDirs)
		}
		files[path] = path
		lib, err := elf.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		more, err := lib.ImportedLibraries()
		lib.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		todo = append(todo, more...)
	}
	return files, nil
}

// rootfs is the layer: files (image path -> host path, symlinks followed),
// their directories, /etc/passwd, /etc/group and /tmp.
func rootfs(files map[string]string, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	paths := []string{"/etc/passwd", "/etc/group"}
	for p := range files {
		paths = append(paths, p)
	}
	for _, p := range paths {
		for d := filepath.Dir(p); d != "/"; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	// Go's os.TempDir, for whatever the agent's libraries write there.
	dirs["/tmp"] = true
	var all []string
	for d := range dirs {
		all = append(all, d)
	}
	slices.Sort(all)
	for _, d := range all {
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: mode, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	etc := map[string]string{
		"/etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n",
		"/etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	}
	slices.Sort(paths)
	for _, p := range paths {
		var body []byte
		mode := int64(0o644)
		if s, ok := etc[p]; ok {
			body = []byte(s)
		} else {
			b, err := os.ReadFile(files[p])
			if err != nil {
				return nil, err
			}
			fi, err := os.Stat(files[p])
			if err != nil {
				return nil, err
			}
			body, mode = b, int64(fi.Mode().Perm())
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p[1:], Mode: mode, Size: int64(len(body)), ModTime: mtime}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes img as an OCI image layout named ref, in a tar
// archive at out (written whole, then renamed).
func writeArchive(img v1.Image, ref, out string) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".mkimage-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{
		Add: img,
		Descriptor: v1.Descriptor{Annotations: map[string]string{
			"org.opencontainers.image.ref.name": ref,
			// What containerd's and podman's importers read as the name.
			"io.containerd.image.name": ref,
		}},
	})
	if _, err := layout.Write(filepath.Join(dir, "layout"), idx); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "archive.tar")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(filepath.Join(dir, "layout"))); err != nil {
		f.Close()
		return err
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Println(out)
	return nil
}
