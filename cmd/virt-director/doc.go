// Command virt-director runs the virtcon director and administers it
// (package directorcli).
package main
