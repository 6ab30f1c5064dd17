//go:build !cgo

package auth

import "context"

// PAMAvailable reports whether this build can call PAM (it needs cgo).
const PAMAvailable = false

// realPAM without cgo: libpam cannot be called.
func realPAM(context.Context, string, string, string, string) error {
	return ErrPAMUnavailable
}
