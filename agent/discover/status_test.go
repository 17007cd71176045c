package discover

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadIDsOwnProcess(t *testing.T) {
	id, err := readIDs("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	if id.uids[0] != uint32(os.Getuid()) || id.uids[1] != uint32(os.Geteuid()) ||
		id.gids[0] != uint32(os.Getgid()) || id.gids[1] != uint32(os.Getegid()) {
		t.Errorf("ids %+v, process uid %d euid %d gid %d egid %d", id, os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid())
	}
	groups, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	if len(id.groups) != len(groups) {
		t.Errorf("groups %v, process %v", id.groups, groups)
	}
	if c := id.cred(); c.uid != id.uids[3] || len(c.gids) != 1+len(groups) || c.gids[0] != id.gids[3] {
		t.Errorf("cred %+v from %+v", c, id)
	}
}

func TestReadIDsRefusesMalformed(t *testing.T) {
	for name, status := range map[string]string{
		"no uid":     "Name:\tx\nGid:\t0\t0\t0\t0\n",
		"no gid":     "Uid:\t0\t0\t0\t0\n",
		"short uid":  "Uid:\t0\t0\t0\nGid:\t0\t0\t0\t0\n",
		"not number": "Uid:\t0\t0\tx\t0\nGid:\t0\t0\t0\t0\n",
		"negative":   "Uid:\t0\t-1\t0\t0\nGid:\t0\t0\t0\t0\n",
		"too large":  "Uid:\t0\t4294967296\t0\t0\nGid:\t0\t0\t0\t0\n",
		"bad group":  "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t1 a\n",
		"empty file": "",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
		if id, err := readIDs(dir); err == nil {
			t.Errorf("%s: read %+v, want an error", name, id)
		}
	}
}

func FuzzReadIDs(f *testing.F) {
	f.Add("Uid:\t0\t0\t0\t0\nGid:\t5\t5\t5\t5\nGroups:\t1 2\n")
	f.Add("Uid:\t1000\t1000\t1000\t1000\nGid:\t0\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, status string) {
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
		id, err := readIDs(dir)
		if err == nil && len(id.cred().gids) != 1+len(id.groups) {
			t.Errorf("cred of %+v", id)
		}
	})
}
