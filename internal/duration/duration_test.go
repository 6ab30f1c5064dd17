package duration

import (
	"flag"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30", 30 * time.Second, true}, {"1.5", 1500 * time.Millisecond, true}, {"0", 0, true}, {" 45 ", 45 * time.Second, true},
		{"90s", 90 * time.Second, true}, {"2m", 2 * time.Minute, true}, {"1h30m", 90 * time.Minute, true}, {"0s", 0, true},
		{"-5", 0, false}, {"-5s", 0, false}, {"soon", 0, false}, {"5x", 0, false}, {"", 0, false},
		{"NaN", 0, false}, {"Inf", 0, false}, {"1e3", 0, false}, {"0x10", 0, false}, {"1e400", 0, false}, {"99999999999999999999", 0, false},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("Parse(%q): got %v, %v; want %v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestValueWithStdlibFlag(t *testing.T) {
	t.Parallel()
	var d time.Duration
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(NewValue(&d, time.Minute), "idle", "")
	if d != time.Minute {
		t.Fatalf("default: got %v", d)
	}
	if err := fs.Parse([]string{"--idle", "30"}); err != nil || d != 30*time.Second {
		t.Errorf("--idle 30: got %v, %v; want 30s", d, err)
	}
	if err := fs.Parse([]string{"--idle", "-1"}); err == nil {
		t.Error("--idle -1: accepted")
	}
}

func TestDurationText(t *testing.T) {
	t.Parallel()
	var d Duration
	for in, want := range map[string]time.Duration{"90": 90 * time.Second, "1m30s": 90 * time.Second, "0": 0} {
		if err := d.UnmarshalText([]byte(in)); err != nil || d.D() != want {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", in, d, err, want)
		}
	}
	if err := d.UnmarshalText([]byte("-3")); err == nil {
		t.Error("UnmarshalText(-3): accepted")
	}
	if b, _ := Duration(90 * time.Second).MarshalText(); string(b) != "1m30s" {
		t.Errorf("MarshalText = %s; want 1m30s", b)
	}
}
