//! Scratch files for the file-system experiments: making, reopening uncached, timed
//! block reads and the device-read counter.
