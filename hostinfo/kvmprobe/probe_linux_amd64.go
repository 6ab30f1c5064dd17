package kvmprobe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Guest layout and protocol.
const (
	guestMemSize = 64 << 10   // guest physical 0..64 KiB, anonymous host memory
	tssAddr      = 0xfffbd000 // KVM_SET_TSS_ADDR: three pages just below the 4 GiB BIOS area, as QEMU does
	ioProgAddr   = 0x1000     // first program: OUT then HLT
	loopProgAddr = 0x2000     // second program: the timed loop

	// probePort is the I/O port the guest writes to. 0x0AB0 is unassigned
	// in the legacy PC I/O map, and the probe VM has no in-kernel devices
	// (no irqchip, no PIT), so every access to it exits to us; it is
	// reached with `out dx, al` because it does not fit the imm8 form.
	probePort = 0x0AB0
	ioValue   = 0x42 // written by the first program
	loopValue = 0x43 // written by the loop program once the loop is done

	// loopCount iterations take 4-20 ms at native speed (1e9-5e9
	// iter/s) and 200 ms at MinItersPerSec.
	loopCount = 20_000_000
	// runBudget bounds all guest execution: the two setup exits take
	// microseconds on working KVM, and a loop not done within 1.5x its
	// time at MinItersPerSec cannot meet the threshold, so waiting longer
	// would only make `virt host check` slow on hosts where KVM crawls.
	runBudget = 100*time.Millisecond + time.Duration(1.5*loopCount/MinItersPerSec*float64(time.Second))
	// loopExitOffset is where the loop program's code after the loop starts.
	loopExitOffset = 10
)

// ioProgram is 16-bit real-mode code (CS base 0, so IP == guest physical).
var ioProgram = []byte{
	0xB0, ioValue, // mov al, 0x42
	0xBA, probePort & 0xFF, probePort >> 8, // mov dx, probePort
	0xEE, // out dx, al
	0xF4, // hlt
}

// loopProgram is 16-bit real-mode code; the 0x66 operand-size prefix makes
// the counter 32-bit.
func loopProgram(n uint32) []byte {
	return []byte{
		0x66, 0xB9, byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24), // 0: mov ecx, n
		0x66, 0x49, // 6: L: dec ecx
		0x75, 0xFC, // 8: jnz L (rel8 -4, from 10 back to 6)
		0xB0, loopValue, // 10: mov al, 0x43
		0xBA, probePort & 0xFF, probePort >> 8, // 12: mov dx, probePort
		0xEE, // 15: out dx, al
		0xF4, // 16: hlt
	}
}

// errKicked: the watchdog pulled the vCPU out of KVM_RUN at the budget.
var errKicked = errors.New("vCPU kicked out by the watchdog")

type prober struct {
	r        Result
	emit     func(Result)
	deadline time.Time

	kvmFd, vmFd, vcpuFd int
	mem, run            []byte
	tid                 int

	kicked    atomic.Bool
	stopWatch chan struct{}
	watching  sync.WaitGroup
}

// runProbe runs the probe in this process. emit is called with the partial
// Result each time a stage starts. Time spent in KVM_RUN is bounded by
// budget: past it a watchdog kicks the vCPU out and the probe reports how
// far the guest got; the parent's hard deadline covers everything else.
func runProbe(device string, budget time.Duration, emit func(Result)) Result {
	// vCPU ioctls belong on one thread, and the watchdog signals that thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p := &prober{
		r:        Result{Device: device},
		emit:     emit,
		deadline: time.Now().Add(budget),
		kvmFd:    -1, vmFd: -1, vcpuFd: -1,
		stopWatch: make(chan struct{}),
	}
	defer p.close()
	if err := p.probe(); err != nil {
		p.r.Error = err.Error()
		return p.r
	}
	p.stage(StageDone)
	return p.r
}

func (p *prober) stage(s string) {
	p.r.Stage = s
	if p.emit != nil {
		p.emit(p.r)
	}
}

func (p *prober) probe() error {
	p.stage(StageOpen)
	fd, err := unix.Open(p.r.Device, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p.r.Device, err)
	}
	p.kvmFd = fd

	p.stage(StageAPIVersion)
	v, err := ioctl(fd, kvmGetAPIVersion, 0)
	if err != nil {
		return fmt.Errorf("KVM_GET_API_VERSION: %w", err)
	}
	p.r.APIVersion = v
	if v != kvmAPIVersion {
		return fmt.Errorf("KVM_GET_API_VERSION: %d, want %d", v, kvmAPIVersion)
	}
	p.r.Extensions = make(map[string]bool, len(probedCaps))
	values := map[uintptr]int{}
	for _, c := range probedCaps {
		n, err := ioctl(fd, kvmCheckExtension, c.nr)
		p.r.Extensions[c.name] = err == nil && n > 0
		if err == nil {
			values[c.nr] = n
		}
	}
	// api.rst: KVM_CAP_MAX_VCPUS, else KVM_CAP_NR_VCPUS, else 4.
	p.r.MaxVCPUs = values[capMaxVCPUs]
	if p.r.MaxVCPUs <= 0 {
		p.r.MaxVCPUs = values[capNrVCPUs]
	}
	if p.r.MaxVCPUs <= 0 {
		p.r.MaxVCPUs = 4
	}
	mmapSize, err := ioctl(fd, kvmGetVCPUMmapSize, 0)
	if err != nil {
		return fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %w", err)
	}
	if mmapSize < runInternalData+16*8 {
		return fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %d bytes is too small for struct kvm_run", mmapSize)
	}

	p.stage(StageCreateVM)
	if p.vmFd, err = ioctl(fd, kvmCreateVM, 0); err != nil {
		p.vmFd = -1
		return fmt.Errorf("KVM_CREATE_VM: %w", err)
	}
	if p.r.Extensions["KVM_CAP_SET_TSS_ADDR"] {
		if _, err := ioctl(p.vmFd, kvmSetTSSAddr, tssAddr); err != nil {
			return fmt.Errorf("KVM_SET_TSS_ADDR: %w", err)
		}
	}

	p.stage(StageMemory)
	if p.mem, err = unix.Mmap(-1, 0, guestMemSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE); err != nil {
		return fmt.Errorf("mmap guest memory: %w", err)
	}
	copy(p.mem[ioProgAddr:], ioProgram)
	copy(p.mem[loopProgAddr:], loopProgram(loopCount))
	region := kvmUserspaceMemoryRegion{
		Slot:          0,
		GuestPhysAddr: 0,
		MemorySize:    guestMemSize,
		UserspaceAddr: uint64(uintptr(unsafe.Pointer(&p.mem[0]))),
	}
	if err := ioctlPtr(p.vmFd, kvmSetUserMemoryRegion, unsafe.Pointer(&region)); err != nil {
		return fmt.Errorf("KVM_SET_USER_MEMORY_REGION: %w", err)
	}

	p.stage(StageCreateVCPU)
	if p.vcpuFd, err = ioctl(p.vmFd, kvmCreateVCPU, 0); err != nil {
		p.vcpuFd = -1
		return fmt.Errorf("KVM_CREATE_VCPU: %w", err)
	}
	if p.run, err = unix.Mmap(p.vcpuFd, 0, mmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("mmap kvm_run: %w", err)
	}
	var sregs kvmSregs
	if err := ioctlPtr(p.vcpuFd, kvmGetSregs, unsafe.Pointer(&sregs)); err != nil {
		return fmt.Errorf("KVM_GET_SREGS: %w", err)
	}
	// The vCPU comes out of reset in real mode at F000:FFF0; move CS to 0
	// so that IP is the guest physical address.
	sregs.CS.Base, sregs.CS.Selector = 0, 0
	if err := ioctlPtr(p.vcpuFd, kvmSetSregs, unsafe.Pointer(&sregs)); err != nil {
		return fmt.Errorf("KVM_SET_SREGS: %w", err)
	}
	if err := p.setRegs(kvmRegs{RIP: ioProgAddr, RFLAGS: 2, RSP: guestMemSize - 16}); err != nil {
		return err
	}
	p.tid = unix.Gettid()
	if d := time.Now().Add(runBudget); d.Before(p.deadline) {
		p.deadline = d
	}
	p.watching.Add(1)
	go p.watch()

	p.stage(StageRunIO)
	reason, err := p.runVCPU(nil)
	if err != nil {
		return err
	}
	if err := p.expectOut(reason, ioValue); err != nil {
		return err
	}
	p.r.IOExitOK = true

	p.stage(StageRunHLT)
	if reason, err = p.runVCPU(nil); err != nil {
		return err
	}
	if reason != exitHLT {
		return p.exitError(reason, "KVM_EXIT_HLT")
	}
	p.r.HaltOK = true

	p.stage(StageLoop)
	// RCX=loopCount up front, so a kick before `mov ecx` counts 0 iterations.
	if err := p.setRegs(kvmRegs{RIP: loopProgAddr, RFLAGS: 2, RCX: loopCount, RSP: guestMemSize - 16}); err != nil {
		return err
	}
	var spent time.Duration
	reason, err = p.runVCPU(&spent)
	if errors.Is(err, errKicked) {
		regs, rerr := p.getRegs()
		if rerr != nil {
			return fmt.Errorf("%w after the timed loop was kicked", rerr)
		}
		done := uint64(loopCount - uint32(regs.RCX))
		if regs.RIP >= loopProgAddr+loopExitOffset {
			done = loopCount
		}
		p.setLoop(done, spent)
		return fmt.Errorf("timed loop unfinished after %v in KVM_RUN: %d of %d iterations (%s)",
			spent.Round(time.Millisecond), done, uint64(loopCount), rate(p.r.ItersPerSec))
	}
	if err != nil {
		return err
	}
	if err := p.expectOut(reason, loopValue); err != nil {
		return err
	}
	regs, err := p.getRegs()
	if err != nil {
		return err
	}
	if ecx := uint32(regs.RCX); ecx != 0 {
		return fmt.Errorf("timed loop reported done with ecx=%d, want 0", ecx)
	}
	p.setLoop(loopCount, spent)
	if reason, err = p.runVCPU(nil); err != nil {
		return err
	}
	if reason != exitHLT {
		return p.exitError(reason, "KVM_EXIT_HLT after the timed loop")
	}
	return nil
}

func (p *prober) setLoop(iters uint64, spent time.Duration) {
	p.r.LoopIterations = iters
	p.r.LoopNanos = spent.Nanoseconds()
	if spent > 0 {
		p.r.ItersPerSec = float64(iters) / spent.Seconds()
	}
}

// runVCPU enters the guest until it exits for a reason other than a signal,
// and returns that reason. With spent non-nil it adds the monotonic time
// spent inside KVM_RUN.
func (p *prober) runVCPU(spent *time.Duration) (uint32, error) {
	for {
		if p.kicked.Load() {
			if regs, err := p.getRegs(); err == nil {
				return 0, fmt.Errorf("KVM_RUN still running at the probe budget, guest RIP %#x: %w", regs.RIP, errKicked)
			}
			return 0, fmt.Errorf("KVM_RUN still running at the probe budget: %w", errKicked)
		}
		t0 := time.Now()
		_, err := ioctl(p.vcpuFd, kvmRun, 0)
		if spent != nil {
			*spent += time.Since(t0)
		}
		if errors.Is(err, unix.EINTR) {
			continue // a signal (Go runtime, or the watchdog): re-enter or stop above
		}
		if err != nil {
			return 0, fmt.Errorf("KVM_RUN: %w", err)
		}
		if r := p.exitReason(); r != exitIntr {
			return r, nil
		}
	}
}

// watch kicks the vCPU out of KVM_RUN once the budget is spent: it sets
// kvm_run.immediate_exit (for a thread about to enter) and signals the vCPU
// thread (for one already inside) until the probe stops it.
func (p *prober) watch() {
	defer p.watching.Done()
	t := time.NewTimer(time.Until(p.deadline))
	defer t.Stop()
	select {
	case <-p.stopWatch:
		return
	case <-t.C:
	}
	p.kicked.Store(true)
	// immediate_exit is byte 1 of the first little-endian word of kvm_run.
	atomic.OrUint32((*uint32)(unsafe.Pointer(&p.run[0])), 1<<(8*runImmediateExit))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		// SIGURG: the Go runtime handles it and tolerates spurious ones.
		_ = unix.Tgkill(unix.Getpid(), p.tid, unix.SIGURG)
		select {
		case <-p.stopWatch:
			return
		case <-tick.C:
		}
	}
}

func (p *prober) close() {
	close(p.stopWatch)
	p.watching.Wait()
	if p.run != nil {
		_ = unix.Munmap(p.run)
	}
	for _, fd := range []int{p.vcpuFd, p.vmFd, p.kvmFd} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	// KVM holds the guest memory until the VM is gone, i.e. after the
	// last fd is closed; unmapping it after that is the safe order.
	if p.mem != nil {
		_ = unix.Munmap(p.mem)
	}
}

func (p *prober) exitReason() uint32 {
	return binary.LittleEndian.Uint32(p.run[runExitReason:])
}

// expectOut checks for a 1-byte OUT of want to probePort.
func (p *prober) expectOut(reason uint32, want byte) error {
	if reason != exitIO {
		return p.exitError(reason, "KVM_EXIT_IO")
	}
	dir, size, port, count, val := p.ioExit()
	if dir != exitIOOut || size != 1 || port != probePort || count != 1 || val != want {
		return fmt.Errorf("KVM_EXIT_IO: %s, want out port %#x size 1 count 1 value %#x",
			describeIO(dir, size, port, count, val), probePort, want)
	}
	return nil
}

// ioExit decodes kvm_run.io: direction, size, port, count, and the first
// data byte (at data_offset within kvm_run).
func (p *prober) ioExit() (dir, size uint8, port uint16, count uint32, val byte) {
	u := p.run[runUnion:]
	dir, size = u[0], u[1]
	port = binary.LittleEndian.Uint16(u[2:])
	count = binary.LittleEndian.Uint32(u[4:])
	if off := binary.LittleEndian.Uint64(u[8:]); off < uint64(len(p.run)) {
		val = p.run[off]
	}
	return
}

func describeIO(dir, size uint8, port uint16, count uint32, val byte) string {
	d := "in"
	if dir == exitIOOut {
		d = "out"
	}
	return fmt.Sprintf("%s port %#x size %d count %d value %#x", d, port, size, count, val)
}

// exitError names an unexpected exit with whatever detail KVM gives for it.
func (p *prober) exitError(reason uint32, want string) error {
	name, ok := exitNames[reason]
	if !ok {
		name = fmt.Sprintf("exit reason %d", reason)
	}
	u := p.run[runUnion:]
	var detail string
	switch reason {
	case exitUnknown:
		detail = fmt.Sprintf(" (hardware_exit_reason %#x)", binary.LittleEndian.Uint64(u))
	case exitFailEntry:
		detail = fmt.Sprintf(" (hardware_entry_failure_reason %#x, cpu %d)",
			binary.LittleEndian.Uint64(u), binary.LittleEndian.Uint32(u[8:]))
	case exitInternalError:
		sub := binary.LittleEndian.Uint32(u)
		subName, ok := internalErrorNames[sub]
		if !ok {
			subName = "unknown"
		}
		nd := min(binary.LittleEndian.Uint32(p.run[runInternalNData:]), 16)
		data := make([]string, nd)
		for i := range data {
			data[i] = fmt.Sprintf("%#x", binary.LittleEndian.Uint64(p.run[runInternalData+8*i:]))
		}
		detail = fmt.Sprintf(" (suberror %d %s, data [%s])", sub, subName, strings.Join(data, " "))
	case exitIO:
		detail = " (" + describeIO(p.ioExit()) + ")"
	}
	if regs, err := p.getRegs(); err == nil {
		detail += fmt.Sprintf(", guest RIP %#x", regs.RIP)
	}
	return fmt.Errorf("KVM_RUN: unexpected %s%s; want %s", name, detail, want)
}

func (p *prober) getRegs() (kvmRegs, error) {
	var regs kvmRegs
	if err := ioctlPtr(p.vcpuFd, kvmGetRegs, unsafe.Pointer(&regs)); err != nil {
		return regs, fmt.Errorf("KVM_GET_REGS: %w", err)
	}
	return regs, nil
}

func (p *prober) setRegs(regs kvmRegs) error {
	if err := ioctlPtr(p.vcpuFd, kvmSetRegs, unsafe.Pointer(&regs)); err != nil {
		return fmt.Errorf("KVM_SET_REGS: %w", err)
	}
	return nil
}

func ioctl(fd int, req, arg uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

func ioctlPtr(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}
