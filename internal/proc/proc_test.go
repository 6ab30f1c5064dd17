package proc

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"testing"
)

func TestParseStat(t *testing.T) {
	rest := " 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20 21"
	tests := []struct {
		name, in string
		want     Stat
		wantErr  bool
	}{
		{"plain", "17 (virt) S" + rest, Stat{State: 'S', Start: 4242, Comm: "virt", UTime: 11, STime: 12}, false},
		{"spaces and parentheses in the name", "17 (a) b (c)) Z" + rest, Stat{State: 'Z', Start: 4242, Comm: "a) b (c)", UTime: 11, STime: 12}, false},
		{"a vCPU thread", "4243 (CPU 0/TCG) S" + rest, Stat{State: 'S', Start: 4242, Comm: "CPU 0/TCG", UTime: 11, STime: 12}, false},
		{"bad utime", "17 (virt) S 1 2 3 4 5 6 7 8 9 10 zz 12 13 14 15 16 17 18 4242 20", Stat{}, true},
		{"no name", "17 virt S" + rest, Stat{}, true},
		{"too short", "17 (virt) S 1 2 3", Stat{}, true},
		{"state of two letters", "17 (virt) SS" + rest, Stat{}, true},
		{"bad start time", "17 (virt) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x 20", Stat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseStat(%q) = %+v, %v; want %+v, error %t", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestReadStat(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil || st.Start == 0 || st.State == 0 || st.Gone() {
		t.Errorf("ReadStat(self) = %+v, %v; want a live state and a start time", st, err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("needs true(1) for a pid that is gone: %v", err)
	}
	if _, err := ReadStat(cmd.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadStat(reaped pid %d) = %v; want fs.ErrNotExist", cmd.Process.Pid, err)
	}
}

func TestGone(t *testing.T) {
	for state, want := range map[byte]bool{'R': false, 'S': false, 'D': false, 'Z': true, 'X': true} {
		if got := (Stat{State: state}).Gone(); got != want {
			t.Errorf("Stat{State: %q}.Gone() = %t; want %t", state, got, want)
		}
	}
}

func TestBootID(t *testing.T) {
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err != nil {
		t.Skipf("no boot id here: %v", err)
	}
	if id := BootID(); len(id) != 36 {
		t.Errorf("BootID() = %q; want a UUID", id)
	}
}

// Same tells the process a record names from a later one with its PID,
// from one of another boot, and from a process that is gone.
func TestSame(t *testing.T) {
	self, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("needs true(1) for a pid that is gone: %v", err)
	}
	for _, tc := range []struct {
		name  string
		pid   int
		start uint64
		boot  string
		want  bool
	}{
		{"this process", os.Getpid(), self.Start, BootID(), true},
		{"no boot id recorded", os.Getpid(), self.Start, "", true},
		{"a later process with the pid", os.Getpid(), self.Start + 1, BootID(), false},
		{"another boot", os.Getpid(), self.Start, "00000000-0000-0000-0000-000000000000", false},
		{"gone", cmd.Process.Pid, 1, "", false},
	} {
		got, err := Same(tc.pid, tc.start, tc.boot)
		if err != nil || got != tc.want {
			t.Errorf("%s: Same = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}
