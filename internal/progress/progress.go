// Package progress shows how far a long experiment is: a bar with an ETA
// on a terminal, nothing elsewhere (a log or a pipe gets only the
// results).
package progress

import (
	"fmt"
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Bar is the progress of one experiment; it implements runner.Progress.
type Bar struct {
	w   io.Writer
	bar *progressbar.ProgressBar
	vis bool
}

// New returns a bar that draws on w when w is a terminal.
func New(w io.Writer) *Bar {
	f, ok := w.(*os.File)
	return &Bar{w: w, vis: ok && term.IsTerminal(int(f.Fd()))}
}

// Begin starts the bar at 0 of total steps.
func (p *Bar) Begin(total int) {
	p.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetVisibility(p.vis),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetWidth(20),
	)
}

// Next says what the step now starting is.
func (p *Bar) Next(desc string) {
	if p.bar != nil {
		p.bar.Describe(fmt.Sprintf("%-36s", desc))
	}
}

// Advance counts a step done.
func (p *Bar) Advance() {
	if p.bar != nil {
		p.bar.Add(1)
	}
}

// Note shows msg at once on a terminal; elsewhere the caller reports it
// with the results (run's table repeats every note), so it is not doubled.
func (p *Bar) Note(msg string) {
	if !p.vis {
		return
	}
	if p.bar != nil {
		p.bar.Clear()
	}
	fmt.Fprintf(p.w, "note: %s\n", msg)
}

// Finish ends the bar: completed when ok, left where it stopped if not.
func (p *Bar) Finish(ok bool) {
	if p.bar == nil {
		return
	}
	if ok {
		p.bar.Finish()
	} else {
		p.bar.Exit()
	}
}
