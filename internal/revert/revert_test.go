package revert

import (
	"errors"
	"reflect"
	"testing"
)

func TestFailRunsInReverse(t *testing.T) {
	var got []int
	r := New()
	for i := 1; i <= 3; i++ {
		i := i
		r.Add(func() error { got = append(got, i); return nil })
	}
	if err := r.Fail(); err != nil {
		t.Fatal(err)
	}
	if want := []int{3, 2, 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("undo order %v; want %v", got, want)
	}
	if err := r.Fail(); err != nil || len(got) != 3 {
		t.Errorf("second Fail ran undos again: %v", got)
	}
}

func TestSuccessKeeps(t *testing.T) {
	ran := false
	r := New()
	r.Add(func() error { ran = true; return nil })
	r.Success()
	if err := r.Fail(); err != nil || ran {
		t.Errorf("Fail after Success ran an undo (ran=%t, err=%v)", ran, err)
	}
}

func TestFailJoinsErrors(t *testing.T) {
	e1, e2 := errors.New("one"), errors.New("two")
	r := New()
	r.Add(func() error { return e1 })
	r.Add(func() error { return e2 })
	err := r.Fail()
	if !errors.Is(err, e1) || !errors.Is(err, e2) {
		t.Errorf("Fail() = %v; want both errors", err)
	}
}
