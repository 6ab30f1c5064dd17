package kvmprobe

import (
	"bytes"
	"testing"
)

// The hand-assembled loop must branch back onto `dec ecx` and fall through
// to the code at loopExitOffset.
func TestLoopProgram(t *testing.T) {
	prog := loopProgram(0x11223344)
	if !bytes.Equal(prog[:6], []byte{0x66, 0xB9, 0x44, 0x33, 0x22, 0x11}) {
		t.Errorf("mov ecx encoding % x", prog[:6])
	}
	if prog[8] != 0x75 {
		t.Fatalf("no jnz at 8: % x", prog)
	}
	if target := 10 + int(int8(prog[9])); target != 6 || !bytes.Equal(prog[6:8], []byte{0x66, 0x49}) {
		t.Errorf("jnz goes to %d (% x); want 6 (66 49, dec ecx)", target, prog[target:target+2])
	}
	if prog[loopExitOffset] != 0xB0 || prog[loopExitOffset+1] != loopValue {
		t.Errorf("code after the loop is % x", prog[loopExitOffset:])
	}
	if !bytes.Equal(prog[len(prog)-5:], []byte{0xBA, probePort & 0xFF, probePort >> 8, 0xEE, 0xF4}) {
		t.Errorf("tail % x; want mov dx, port; out dx, al; hlt", prog[len(prog)-5:])
	}
	if !bytes.Equal(ioProgram[len(ioProgram)-5:], prog[len(prog)-5:]) {
		t.Error("the two programs write to different ports")
	}
}
