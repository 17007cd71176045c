// Command mkpkg builds the .deb and the .rpm of vgpu-probe (`make
// package`) from the tree `make install DESTDIR=... PREFIX=/usr` staged,
// described by packaging/nfpm.yaml, with nfpm as a library: no dpkg-deb or
// rpmbuild needed, and only the two packagers it uses are linked in.
//
//	mkpkg -config packaging/nfpm.yaml -root build/pkgroot -version 0.9.0 -out build/pkg
//
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
	root := flag.String("root", "", "the staged install tree (make install DESTDIR=ROOT PREFIX=/usr)")
	version := flag.String("version", "", "the packages' version (the VERSION file's)")
	out := flag.String("out", ".", "directory to write the packages into")
	formats := flag.String("formats", "deb,rpm", "comma-separated package formats: deb, rpm")
	flag.Parse()
	if err := run(*config, *root, *version, *out, strings.Split(*formats, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "mkpkg:", err)
		os.Exit(1)
	}
}

var packagers = map[string]nfpm.Packager{"deb": deb.Default, "rpm": rpm.DefaultRPM}

func run(config, root, version, out string, formats []string) error {
	if root == "" || version == "" {
		return fmt.Errorf("-root and -version are required")
	}
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
	for _, format := range formats {
		p, ok := packagers[format]
		if !ok {
			return fmt.Errorf("unknown package format %q (deb, rpm)", format)
		}
		if err := write(&cfg, filepath.Dir(config), format, p, out); err != nil {
			return fmt.Errorf("%s: %w", format, err)
		}
	}
	return nil
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
