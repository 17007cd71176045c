package mitigate

import (
	"errors"
	"os"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/runstate"
)

// Recover puts back the slices that agents which died (SIGKILL, an OOM
// kill, a crash) left in dir's journals, and returns how many threads it
// restored. A recorded thread is restored only while it is the same
// thread (same start time) and still has the dead agent's slice: a tid
// the kernel reused, or a slice someone changed since, is left alone.
// Threads of a recorded process that are not recorded but have the
// dead agent's slice inherited it (custom slices survive clone): they
// get the kernel's default.
func Recover(dir string, s Sched, log zerolog.Logger) (int, error) {
	if s == nil {
		s = System
	}
	n := 0
	err := runstate.Orphans(dir, func(rec runstate.Record) error {
		var errs []error
		recorded := map[int]bool{}
		procs := map[int]uint64{}
		for _, th := range rec.Threads {
			recorded[th.TID] = true
			if th.TGID > 0 {
				procs[th.TGID] = th.TGIDStart
			}
			ok, err := putBack(s, th.TID, th.Start, rec.SliceNs, th.Restore)
			if ok {
				n++
			}
			errs = append(errs, err)
		}
		for tgid, start := range procs {
			if st, err := runstate.StartTime(tgid); err != nil || st != start {
				continue // exited, or another process now
			}
			tasks, err := os.ReadDir("/proc/" + strconv.Itoa(tgid) + "/task")
			if err != nil {
				continue
			}
			for _, e := range tasks {
				tid, err := strconv.Atoi(e.Name())
				if err != nil || recorded[tid] {
					continue
				}
				ok, err := putBack(s, tid, 0, rec.SliceNs, 0)
				if ok {
					n++
				}
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			log.Error().Err(err).Int("agent_pid", rec.PID).Msg("mitigation: putting back a dead agent's slices")
			return err
		}
		return nil
	})
	return n, err
}

// putBack sets tid's slice to restore if it still has slice (and, with a
// start time, is still the thread that started then); true if it did.
// A thread that is gone is no error.
func putBack(s Sched, tid int, start, slice, restore uint64) (bool, error) {
	if start != 0 {
		if st, err := runstate.StartTime(tid); err != nil || st != start {
			return false, nil
		}
	}
	a, err := s.Get(tid)
	if err != nil || !fair(a.Policy) || a.Runtime != slice {
		return false, nil
	}
	if err := s.Set(tid, withRuntime(a, restore)); err != nil && !gone(err) {
		return false, err
	}
	return true, nil
}
