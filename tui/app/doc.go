// Package app is the DCUI's root model: the frame, the header with the
// login state, the page tabs, the CLI line and the key legend around the
// screens; the login form; the idle lock; and the single-writer console
// lock. It routes keys to the visible screen and every other message to
// all of them. It holds no host logic: login goes through Auth and the
// lock through Locker (both from the auth package in production).
//
// It imports no screen: the screens come as Pages from tui/dcui.
package app
