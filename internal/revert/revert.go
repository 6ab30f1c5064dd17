package revert

import "errors"

// Stack collects undo functions.
type Stack struct {
	undo []func() error
	done bool
}

// New returns an empty stack. Use as:
//
//	r := revert.New(); defer r.Fail()
//	... r.Add(undo) after each step ...
//	r.Success()
func New() *Stack { return &Stack{} }

// Add pushes an undo function.
func (s *Stack) Add(f func() error) { s.undo = append(s.undo, f) }

// Success keeps the changes: later Fail calls do nothing.
func (s *Stack) Success() { s.done = true }

// Fail runs the undos in reverse order unless Success was called, and
// returns their errors joined.
func (s *Stack) Fail() error {
	if s.done {
		return nil
	}
	s.done = true
	var errs []error
	for i := len(s.undo) - 1; i >= 0; i-- {
		if err := s.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
