package agent

import (
	"errors"

	"github.com/virtcon/virtcon/internal/fielderr"
)

var (
	// ErrNotEnrolled: the host has no credentials (identity.pem).
	ErrNotEnrolled = errors.New("not enrolled into a director")
	// ErrAlreadyEnrolled: the host holds a live credential; it must
	// leave before it enrols again.
	ErrAlreadyEnrolled = errors.New("already enrolled into a director")
	// ErrRevoked: the director refused the node's credential as revoked.
	// The agent stops; VMs are untouched; only a new enrolment helps.
	ErrRevoked = errors.New("node credential revoked by the director")
	// ErrExpired: the node's certificate expired (by this host's clock
	// or the director's). As ErrRevoked: stop, touch nothing, re-enrol.
	ErrExpired = errors.New("node certificate expired")
	// ErrRunning: another agent holds the lock.
	ErrRunning = errors.New("the agent is running")
	// ErrTokenRefused: the director refused the join token (unknown,
	// used, expired or revoked: it says no more, by design).
	ErrTokenRefused = errors.New("the director refused the join token")
	// ErrEnrollDenied: the director refused the enrolment for a reason
	// it names (the token is for another node name, the node is revoked).
	ErrEnrollDenied = errors.New("the director refused the enrolment")
	// ErrBadReply: what the director sent does not hold together (a
	// certificate for another key, a chain that is not the pinned CA's).
	ErrBadReply = errors.New("bad reply from the director")
)

// ErrInvalidConfig is an agent.yaml that does not admit.
var ErrInvalidConfig = fielderr.NewKind("invalid agent config")
