// Package iso9660 writes small ISO 9660 images entirely in memory, such as
// the cloud-init NoCloud seed ("cidata") CDs handed to guests.
//
// The image holds a single, flat root directory. Every file is recorded three
// ways so that all common readers see its exact name:
//
//   - a strict ISO 9660 level 1 name (8.3 d-characters, e.g. "META_DAT.;1"),
//   - a Rock Ridge (RRIP 1.09, via SUSP) NM entry in the primary directory,
//     used by Linux isofs, libarchive, xorriso and 7-Zip,
//   - a Joliet (UCS-2, level 3) name in a supplementary volume descriptor,
//     used by Windows and by Linux when mounted with norock.
//
// Output is deterministic: all timestamps come from WriteOptions.ModTime
// (the Unix epoch by default). File contents are written only to the
// supplied io.Writer; nothing is logged or staged on disk.
//
// References: ECMA-119 (ISO 9660), the Joliet specification, SUSP (IEEE
// P1281) and RRIP (IEEE P1282).
//
// It knows nothing of cloud-init: which files a seed holds, and their
// content, are package vm's.
package iso9660
