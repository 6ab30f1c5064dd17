// Package keys is the DCUI key map. Every function key has a letter alias,
// because F-keys often do not arrive over IPMI SOL, serial lines or
// browser consoles; the legend always shows both.
//
//	F1  / h / ?   help
//	F2  / l       log in; when logged in: lock the console
//	F3  / s       status screen
//	F4  / v       virtual machines
//	F5  / r       refresh now
//	F6  / n       network
//	F7  / w       hardware
//	F8  / g       logs
//	F9  / d       diagnostics
//	F11 / p       power (reboot, shut down)
//	      m       director (enrolment; F1-F12 are all taken)
//	F12 / x       log out
//	F10 / q       quit (ctrl+c too; not on the host console)
//	ctrl+l        redraw the screen
//
// Letters the global map uses (h l s v r n w g d p m x q) are reserved
// while no text field is focused; screens use the others (a b c e f i j k
// o t u y z, digits, enter, esc, arrows, tab, /) for their own actions, in
// their menus and dialogs too: a menu takes every key while it is open,
// so a global letter bound there would shadow the global key (x would
// delete instead of logging out). tui/dcui's TestScreenKeysAvoidGlobalKeys
// walks every screen's key map against this one.
//
// # One form for every key map
//
// The global map and each screen's have the same shape (soft-serve's and
// bubbles' help.KeyMap): a KeyMap struct with one key.Binding per action,
// those of the screen's menus, forms and dialogs included, each built with
// On(...).Help(...) so its legend text sits beside its keys; a
// DefaultKeyMap (here Default) that fills it; and the Map methods,
// ShortHelp for the legend of the main view and FullHelp for the help
// screen's columns. A screen keeps its map in a field named keys, answers
// FullHelp with the map's, and ShortHelp with the map's unless a menu,
// form or dialog is open, whose legend it picks from the same map (or
// common.ConfirmHelp for a y/any-other-key confirmation).
//
// It holds bindings and their help text only: what a key does is the
// screen's, and it does no I/O.
package keys
