package exporter

import (
	"context"
	"log/slog"
	"slices"

	"github.com/rs/zerolog"
)

// newSlogLogger is a log/slog logger writing to log, for libraries that
// want one (exporter-toolkit).
func newSlogLogger(log zerolog.Logger) *slog.Logger { return slog.New(slogHandler{log: log}) }

// slogHandler is a slog.Handler over zerolog: levels map to the nearest
// zerolog level, attributes become fields, groups prefix their keys.
type slogHandler struct {
	log    zerolog.Logger
	attrs  []slog.Attr
	prefix string // "group." for each open group
}

var _ slog.Handler = slogHandler{}

func zerologLevel(l slog.Level) zerolog.Level {
	switch {
	case l < slog.LevelInfo:
		return zerolog.DebugLevel
	case l < slog.LevelWarn:
		return zerolog.InfoLevel
	case l < slog.LevelError:
		return zerolog.WarnLevel
	}
	return zerolog.ErrorLevel
}

func (h slogHandler) Enabled(_ context.Context, l slog.Level) bool {
	z := zerologLevel(l)
	return z >= h.log.GetLevel() && z >= zerolog.GlobalLevel()
}

func (h slogHandler) Handle(_ context.Context, r slog.Record) error {
	ev := h.log.WithLevel(zerologLevel(r.Level))
	for _, a := range h.attrs {
		ev = ev.Interface(a.Key, a.Value.Resolve().Any())
	}
	r.Attrs(func(a slog.Attr) bool {
		ev = ev.Interface(h.prefix+a.Key, a.Value.Resolve().Any())
		return true
	})
	ev.Msg(r.Message)
	return nil
}

func (h slogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = slices.Clip(h.attrs)
	for _, a := range as {
		h.attrs = append(h.attrs, slog.Attr{Key: h.prefix + a.Key, Value: a.Value})
	}
	return h
}

func (h slogHandler) WithGroup(name string) slog.Handler {
	if name != "" {
		h.prefix += name + "."
	}
	return h
}
