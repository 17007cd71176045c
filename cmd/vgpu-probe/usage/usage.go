// Package usage marks errors caused by what the user typed, so that main can
// exit with status 2 (bad input) instead of 1 (the work itself failed).
package usage

import (
	"errors"
	"fmt"
)

// ErrBadInput is wrapped by every error that Errorf returns.
var ErrBadInput = errors.New("bad input")

type badInput struct{ msg string }

func (e *badInput) Error() string        { return e.msg }
func (e *badInput) Is(target error) bool { return target == ErrBadInput }

// Errorf formats a one-line message about bad user input.
func Errorf(format string, args ...any) error {
	return &badInput{msg: fmt.Sprintf(format, args...)}
}

// Wrap marks err as caused by bad user input; nil stays nil.
func Wrap(err error) error {
	if err == nil || errors.Is(err, ErrBadInput) {
		return err
	}
	return &badInput{msg: err.Error()}
}
