// Command mkpkg builds the .deb and the .rpm of vgpu-probe (`make
// package`) from the tree `make install DESTDIR=... PREFIX=/usr` staged,
// described by packaging/nfpm.yaml, with nfpm as a library: no dpkg-deb or
// rpmbuild needed, and only the two packagers it uses are linked in.
//
//	mkpkg -config packaging/nfpm.yaml -version 0.9.0 -out build/pkg -deb build/pkgroot-deb -rpm build/pkgroot-rpm
//
// Each format has its own staged tree (the library's directory differs).
// It prints the path of each package it writes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/rpm"
)

func main() {
	config := flag.String("config", "packaging/nfpm.yaml", "the nfpm description of the packages")
	version := flag.String("version", "", "the packages' version (the VERSION file's)")
	out := flag.String("out", ".", "directory to write the packages into")
	roots := map[string]*string{}
	for _, f := range formats {
		roots[f] = flag.String(f, "", "build the ."+f+" from this staged install tree (make install DESTDIR=ROOT PREFIX=/usr)")
	}
	flag.Parse()
	if *version == "" {
		fmt.Fprintln(os.Stderr, "mkpkg: -version is required")
		os.Exit(2)
	}
	built := 0
	for _, f := range formats {
		if *roots[f] == "" {
			continue
		}
		if err := run(*config, *roots[f], *version, *out, f); err != nil {
			fmt.Fprintf(os.Stderr, "mkpkg: %s: %v\n", f, err)
			os.Exit(1)
		}
		built++
	}
	if built == 0 {
		fmt.Fprintln(os.Stderr, "mkpkg: no package asked for: give -deb ROOT, -rpm ROOT or both")
		os.Exit(2)
	}
}

// formats are the package formats mkpkg builds, each with its packager.
var (
	formats   = []string{"deb", "rpm"}
	packagers = map[string]nfpm.Packager{"deb": deb.Default, "rpm": rpm.DefaultRPM}
)

// run builds the package of one format from its staged tree.
func run(config, root, version, out, format string) error {
	if fi, err := os.Stat(filepath.Join(root, "usr", "bin", "vgpu-probe")); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a staged install (no usr/bin/vgpu-probe): run make install DESTDIR=%s PREFIX=/usr", root, root)
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	vars := map[string]string{"VERSION": version, "ARCH": runtime.GOARCH, "PKGROOT": absRoot}
	f, err := os.Open(config)
	if err != nil {
		return err
	}
	defer f.Close()
	// Not the environment: the description names only the above (nfpm
	// itself asks for NFPM_*_PASSPHRASE, signing keys' passphrases: the
	// packages are not signed).
	var unknown []string
	cfg, err := nfpm.ParseWithEnvMapping(f, func(k string) string {
		v, ok := vars[k]
		if !ok && !strings.HasPrefix(k, "NFPM_") {
			unknown = append(unknown, "${"+k+"}")
		}
		return v
	})
	if err != nil {
		return fmt.Errorf("%s: %w", config, err)
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%s names %s, which mkpkg does not set", config, strings.Join(unknown, ", "))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return write(&cfg, filepath.Dir(config), format, packagers[format], out)
}

// write builds one package into out, under its distribution's
// conventional name, written whole before it is renamed into place.
func write(cfg *nfpm.Config, dir, format string, p nfpm.Packager, out string) error {
	info, err := cfg.Get(format)
	if err != nil {
		return err
	}
	// The description names its scripts relative to itself.
	for _, s := range []*string{&info.Scripts.PreInstall, &info.Scripts.PostInstall, &info.Scripts.PreRemove, &info.Scripts.PostRemove} {
		if *s != "" && !filepath.IsAbs(*s) {
			*s = filepath.Join(dir, *s)
		}
	}
	info = nfpm.WithDefaults(info)
	target := filepath.Join(out, p.ConventionalFileName(info))
	info.Target = target
	tmp, err := os.CreateTemp(out, ".mkpkg-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := p.Package(info, tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return err
	}
	fmt.Println(target)
	return nil
}
