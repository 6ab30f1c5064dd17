package kvmprobe

import "unsafe"

// KVM ABI for linux/amd64, from <linux/kvm.h> and <asm/kvm.h>. ioctl
// numbers are _IO/_IOR/_IOW(KVMIO=0xAE, nr, size) spelled out.
const (
	kvmAPIVersion = 12

	kvmGetAPIVersion       = 0xAE00     // _IO(KVMIO, 0x00)
	kvmCreateVM            = 0xAE01     // _IO(KVMIO, 0x01)
	kvmCheckExtension      = 0xAE03     // _IO(KVMIO, 0x03)
	kvmGetVCPUMmapSize     = 0xAE04     // _IO(KVMIO, 0x04)
	kvmCreateVCPU          = 0xAE41     // _IO(KVMIO, 0x41)
	kvmSetUserMemoryRegion = 0x4020AE46 // _IOW(KVMIO, 0x46, struct kvm_userspace_memory_region)
	kvmSetTSSAddr          = 0xAE47     // _IO(KVMIO, 0x47)
	kvmRun                 = 0xAE80     // _IO(KVMIO, 0x80)
	kvmGetRegs             = 0x8090AE81 // _IOR(KVMIO, 0x81, struct kvm_regs)
	kvmSetRegs             = 0x4090AE82 // _IOW(KVMIO, 0x82, struct kvm_regs)
	kvmGetSregs            = 0x8138AE83 // _IOR(KVMIO, 0x83, struct kvm_sregs)
	kvmSetSregs            = 0x4138AE84 // _IOW(KVMIO, 0x84, struct kvm_sregs)
)

// KVM_CAP_* numbers.
const (
	capIRQChip            = 0
	capHLT                = 1
	capUserMemory         = 3
	capSetTSSAddr         = 4
	capExtCPUID           = 7
	capNrVCPUs            = 9
	capSyncMMU            = 16
	capSetIdentityMapAddr = 37
	capTSCControl         = 60
	capMaxVCPUs           = 66
	capImmediateExit      = 136
)

// probedCaps are the extensions recorded in Result.Extensions: what a VMM
// needs to build an ordinary x86 guest.
var probedCaps = []struct {
	name string
	nr   uintptr
}{
	{"KVM_CAP_IRQCHIP", capIRQChip},
	{"KVM_CAP_HLT", capHLT},
	{"KVM_CAP_USER_MEMORY", capUserMemory},
	{"KVM_CAP_SET_TSS_ADDR", capSetTSSAddr},
	{"KVM_CAP_EXT_CPUID", capExtCPUID},
	{"KVM_CAP_NR_VCPUS", capNrVCPUs},
	{"KVM_CAP_MAX_VCPUS", capMaxVCPUs},
	{"KVM_CAP_SYNC_MMU", capSyncMMU},
	{"KVM_CAP_SET_IDENTITY_MAP_ADDR", capSetIdentityMapAddr},
	{"KVM_CAP_TSC_CONTROL", capTSCControl},
	{"KVM_CAP_IMMEDIATE_EXIT", capImmediateExit},
}

// KVM_EXIT_* reasons (kvm_run.exit_reason).
const (
	exitUnknown       = 0
	exitIO            = 2
	exitHLT           = 5
	exitFailEntry     = 9
	exitIntr          = 10
	exitInternalError = 17

	exitIOOut = 1 // kvm_run.io.direction KVM_EXIT_IO_OUT
)

var exitNames = map[uint32]string{
	0: "KVM_EXIT_UNKNOWN", 1: "KVM_EXIT_EXCEPTION", 2: "KVM_EXIT_IO", 3: "KVM_EXIT_HYPERCALL",
	4: "KVM_EXIT_DEBUG", 5: "KVM_EXIT_HLT", 6: "KVM_EXIT_MMIO", 7: "KVM_EXIT_IRQ_WINDOW_OPEN",
	8: "KVM_EXIT_SHUTDOWN", 9: "KVM_EXIT_FAIL_ENTRY", 10: "KVM_EXIT_INTR", 11: "KVM_EXIT_SET_TPR",
	12: "KVM_EXIT_TPR_ACCESS", 16: "KVM_EXIT_NMI", 17: "KVM_EXIT_INTERNAL_ERROR",
	21: "KVM_EXIT_WATCHDOG", 24: "KVM_EXIT_SYSTEM_EVENT", 26: "KVM_EXIT_IOAPIC_EOI",
	27: "KVM_EXIT_HYPERV", 29: "KVM_EXIT_X86_RDMSR", 30: "KVM_EXIT_X86_WRMSR",
	31: "KVM_EXIT_DIRTY_RING_FULL", 32: "KVM_EXIT_AP_RESET_HOLD", 33: "KVM_EXIT_X86_BUS_LOCK",
	34: "KVM_EXIT_XEN", 37: "KVM_EXIT_NOTIFY", 39: "KVM_EXIT_MEMORY_FAULT",
}

var internalErrorNames = map[uint32]string{
	1: "KVM_INTERNAL_ERROR_EMULATION", 2: "KVM_INTERNAL_ERROR_SIMUL_EX",
	3: "KVM_INTERNAL_ERROR_DELIVERY_EV", 4: "KVM_INTERNAL_ERROR_UNEXPECTED_EXIT_REASON",
}

// struct kvm_run offsets (the union starts at 32).
const (
	runImmediateExit = 1
	runExitReason    = 8
	runUnion         = 32 // io.direction, hw.hardware_exit_reason, fail_entry.*, internal.suberror
	runInternalNData = 36 // internal.ndata
	runInternalData  = 40 // internal.data[16]
)

type kvmUserspaceMemoryRegion struct {
	Slot          uint32
	Flags         uint32
	GuestPhysAddr uint64
	MemorySize    uint64
	UserspaceAddr uint64
}

type kvmRegs struct {
	RAX, RBX, RCX, RDX, RSI, RDI, RSP, RBP uint64
	R8, R9, R10, R11, R12, R13, R14, R15   uint64
	RIP, RFLAGS                            uint64
}

type kvmSegment struct {
	Base                                 uint64
	Limit                                uint32
	Selector                             uint16
	Type, Present, DPL, DB, S, L, G, AVL uint8
	Unusable, Padding                    uint8
}

type kvmDTable struct {
	Base    uint64
	Limit   uint16
	Padding [3]uint16
}

type kvmSregs struct {
	CS, DS, ES, FS, GS, SS, TR, LDT         kvmSegment
	GDT, IDT                                kvmDTable
	CR0, CR2, CR3, CR4, CR8, EFER, APICBase uint64
	InterruptBitmap                         [4]uint64
}

// The ioctl numbers above encode these sizes; fail the build if they drift.
var (
	_ [0x20]byte  = [unsafe.Sizeof(kvmUserspaceMemoryRegion{})]byte{}
	_ [0x90]byte  = [unsafe.Sizeof(kvmRegs{})]byte{}
	_ [0x18]byte  = [unsafe.Sizeof(kvmSegment{})]byte{}
	_ [0x138]byte = [unsafe.Sizeof(kvmSregs{})]byte{}
)
