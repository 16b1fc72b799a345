//! The machine description: facts gathered once per run, readable without root.

use crate::clock::ClockInfo;
use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    pub hostname: String,
    pub cpu: Cpu,
    /// The time base (filled by the runner from `clock::detect`).
    pub clock: Option<ClockInfo>,
    pub memory: Memory,
    pub os: Os,
    /// Conditions that may distort measurements (busy, governor, VM, cgroup limits...).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Cpu {
    pub model: String,
    pub logical_cpus: usize,
    /// CPUs this process may run on.
    pub allowed_cpus: Vec<usize>,
    /// Effective core clock measured with a dependent add chain (filled by the runner).
    pub core_clock_hz: Option<f64>,
    pub caches: Vec<Cache>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Cache {
    pub level: u32,
    /// "Data", "Instruction" or "Unified".
    pub kind: String,
    pub size_bytes: u64,
    pub line_bytes: u64,
    pub ways: Option<u32>,
    pub shared_cpus: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Memory {
    pub total_bytes: u64,
    pub available_bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Os {
    pub kernel: String,
}

impl Machine {
    /// Gathers every fact that can be read here.
    pub fn gather() -> Machine {
        Machine {
            hostname: crate::sys::hostname(),
            cpu: Cpu {
                logical_cpus: crate::sys::online_cpus(),
                allowed_cpus: crate::sys::allowed_cpus(),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

impl Machine {
    /// Human-readable description.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "host: {}\ncpu: {} ({} logical CPUs)\n",
            self.hostname, self.cpu.model, self.cpu.logical_cpus
        );
        for w in &self.warnings {
            s.push_str(&format!("warning: {w}\n"));
        }
        s
    }
}
