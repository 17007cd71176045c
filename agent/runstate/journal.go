package runstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Slice is one thread an agent gave its slice, and what to put back.
type Slice struct {
	TID int `json:"tid"`
	// Start is the thread's start time (StartTime): a tid the kernel
	// reused for another thread is not touched.
	Start uint64 `json:"start"`
	// TGID and TGIDStart are its process, whose threads started later
	// inherited the slice from it.
	TGID      int    `json:"tgid"`
	TGIDStart uint64 `json:"tgid_start"`
	// Restore is the sched_runtime to put back (0: the kernel's default).
	Restore uint64 `json:"restore_ns"`
}

// Record is a journal's content.
type Record struct {
	PID     int     `json:"pid"`
	SliceNs uint64  `json:"slice_ns"`
	Threads []Slice `json:"threads"`
}

// Journal is this agent's record of the slices it set, in
// dir/slices-PID.json, locked while the agent lives. Not safe for
// concurrent use (the mitigator serialises it).
type Journal struct {
	f   *os.File
	rec Record
}

const journalPrefix = "slices-"

// OpenJournal creates this process's journal for slices of sliceNs.
func OpenJournal(dir string, sliceNs uint64) (*Journal, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	path := filepath.Join(dir, journalPrefix+strconv.Itoa(os.Getpid())+".json")
	f, ok, err := lockPath(path)
	if err != nil {
		return nil, err
	}
	if !ok || f == nil {
		return nil, fmt.Errorf("journal %s: locked by another process", path)
	}
	j := &Journal{f: f, rec: Record{PID: os.Getpid(), SliceNs: sliceNs, Threads: []Slice{}}}
	if err := j.write(); err != nil {
		j.Close(true)
		return nil, err
	}
	return j, nil
}

// Put records s (replacing a record of the same tid); the slice must be
// set only once it returns nil.
func (j *Journal) Put(s Slice) error {
	i := slices.IndexFunc(j.rec.Threads, func(o Slice) bool { return o.TID == s.TID })
	if i >= 0 {
		j.rec.Threads[i] = s
	} else {
		j.rec.Threads = append(j.rec.Threads, s)
	}
	if err := j.write(); err != nil {
		j.rec.Threads = slices.DeleteFunc(j.rec.Threads, func(o Slice) bool { return o.TID == s.TID })
		return err
	}
	return nil
}

// Delete forgets tid (its slice was put back, or it exited). A failed
// write leaves the record, which recovery skips: it only restores a
// thread that still has the journal's slice.
func (j *Journal) Delete(tid int) error {
	n := len(j.rec.Threads)
	j.rec.Threads = slices.DeleteFunc(j.rec.Threads, func(o Slice) bool { return o.TID == tid })
	if len(j.rec.Threads) == n {
		return nil
	}
	return j.write()
}

// write rewrites the file in place: the lock stays on its inode. The
// content is written before the file is cut to it, and read back as the
// first JSON value, so a crash between the two leaves a readable file.
func (j *Journal) write() error {
	b, err := json.Marshal(j.rec)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	// Room first: a write cut short by a full filesystem would leave a
	// journal nobody can read; without room the old one stays whole.
	if err := unix.Fallocate(int(j.f.Fd()), 0, 0, int64(len(b))); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("journal %s: %w", j.f.Name(), err)
	}
	if _, err := j.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("journal %s: %w", j.f.Name(), err)
	}
	if err := j.f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("journal %s: %w", j.f.Name(), err)
	}
	return nil
}

// Close drops the lock; with remove (every slice was put back) the file
// goes first. A journal left behind is read by the next agent to start.
func (j *Journal) Close(remove bool) {
	if j == nil || j.f == nil {
		return
	}
	if remove {
		os.Remove(j.f.Name())
	}
	j.f.Close()
	j.f = nil
}

// Orphans calls restore with the record of every journal in dir whose
// agent is dead, holding its lock, and removes the journal when restore
// returns nil. A journal that cannot be parsed is removed.
func Orphans(dir string, restore func(Record) error) error {
	paths, err := filepath.Glob(filepath.Join(dir, journalPrefix+"*.json"))
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range paths {
		f, ok, err := lockPath(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok || f == nil {
			continue // a live agent's, or just recovered by another
		}
		var rec Record
		if err := json.NewDecoder(f).Decode(&rec); err == nil {
			err = restore(rec)
			if err != nil {
				errs = append(errs, fmt.Errorf("journal %s: %w", p, err))
				f.Close()
				continue
			}
		}
		os.Remove(p)
		f.Close()
	}
	return errors.Join(errs...)
}
