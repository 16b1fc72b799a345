//! Forked, pinned children released together through a pipe barrier, with result slots
//! in shared memory and reaping that survives a panic (fs.contention, the process
//! switch, cpu.process-create).
