package exporter

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// limitedLog writes a repeating message at most once per period for each
// key, saying how many were left out since its last line: a failure that
// repeats on every scrape or every connection is one line a minute, not
// one per occurrence, and a quiet period writes nothing.
type limitedLog struct {
	log    zerolog.Logger
	period time.Duration
	now    func() time.Time

	mu   sync.Mutex
	keys map[string]*limitedKey
}

type limitedKey struct {
	last       time.Time
	suppressed int
}

func newLimitedLog(log zerolog.Logger, period time.Duration) *limitedLog {
	return &limitedLog{log: log, period: period, now: time.Now, keys: map[string]*limitedKey{}}
}

// event returns the event to write for key at level, or nil while key
// was written less than a period ago.
func (l *limitedLog) event(key string, level zerolog.Level) *zerolog.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		k = &limitedKey{}
		l.keys[key] = k
	}
	now := l.now()
	if !k.last.IsZero() && now.Sub(k.last) < l.period {
		k.suppressed++
		return nil
	}
	ev := l.log.WithLevel(level)
	if k.suppressed > 0 {
		ev = ev.Int("repeats_not_logged", k.suppressed)
	}
	k.last, k.suppressed = now, 0
	return ev
}

func (l *limitedLog) error(key string, err error, msg string) {
	if ev := l.event(key, zerolog.ErrorLevel); ev != nil {
		ev.Err(err).Msg(msg)
	}
}
