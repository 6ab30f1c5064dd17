package taskkind

import "github.com/virtcon/virtcon/api/directorv1"

// The kinds, as the command line spells them.
const (
	CreateVM           = "create-vm"
	StartVM            = "start-vm"
	StopVM             = "stop-vm"
	RebootVM           = "reboot-vm"
	DeleteVM           = "delete-vm"
	PullImage          = "pull-image"
	ApplyNetwork       = "apply-network"
	CollectDiagnostics = "collect-diagnostics"
)

// All is every kind, in the order the command line lists them.
var All = []string{CreateVM, StartVM, StopVM, RebootVM, DeleteVM, PullImage, ApplyNetwork, CollectDiagnostics}

// Of is t's kind, "" when its oneof is empty (a kind this side's
// protocol does not know, or none).
func Of(t *directorv1.Task) string {
	switch t.GetKind().(type) {
	case *directorv1.Task_CreateVm:
		return CreateVM
	case *directorv1.Task_StartVm:
		return StartVM
	case *directorv1.Task_StopVm:
		return StopVM
	case *directorv1.Task_RebootVm:
		return RebootVM
	case *directorv1.Task_DeleteVm:
		return DeleteVM
	case *directorv1.Task_PullImage:
		return PullImage
	case *directorv1.Task_ApplyNetwork:
		return ApplyNetwork
	case *directorv1.Task_CollectDiagnostics:
		return CollectDiagnostics
	}
	return ""
}
