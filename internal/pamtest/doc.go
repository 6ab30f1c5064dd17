// Package pamtest gives tests real Unix users, groups and a PAM service to
// log in through: the auth integration tests and the DCUI's tmux tests use
// it. Everything it creates is removed in t.Cleanup. It is imported only by
// tests; its functions need root and skip the test, with a reason, when a
// part is missing.
//
// Commands run with argument vectors, never through a shell, and passwords
// reach chpasswd on its standard input, never on a command line. It
// changes only what it made (users vctu*, groups vctg*, services
// /etc/pam.d/virtcon-test-*), never an existing account or service.
package pamtest
