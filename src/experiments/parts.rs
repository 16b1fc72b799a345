//! The parts table: published figures per CPU core, keyed by what identifies the part
//! (x86 CPUID vendor, family and model; arm64 MIDR implementer and part; Apple chip), each
//! figure with its reference. Predictions read only these, facts of the machine and
//! figures measured earlier in the run (issue 20). A part or a figure that is not here
//! gives no prediction, with the reason; never a "typical" number.
//!
//! Entries are checked against their reference, never against a measurement of ours.
//! Figures are load-to-use latencies of a dependent pointer chase (what mem.latency
//! measures), in core cycles.

use crate::machine::Machine;

/// One published figure and where it is published.
#[derive(Debug, Clone, Copy)]
pub struct Figure {
    pub value: f64,
    pub reference: &'static str,
}

/// What identifies a core in the table.
#[derive(Debug, Clone, Copy)]
pub enum Match {
    /// x86 `vendor_id`, CPUID family and the models of that family.
    X86 {
        vendor: &'static str,
        family: u32,
        models: &'static [u32],
    },
    /// arm64 MIDR implementer and part, as /proc/cpuinfo lists them ("0x41", "0xd0c").
    Arm {
        implementer: &'static str,
        part: &'static str,
    },
    /// An Apple silicon chip, by the start of its brand string ("Apple M1").
    AppleChip(&'static str),
    /// macOS `hw.cpufamily` (Apple's CPUFAMILY_* constants, <mach/machine.h>).
    MacFamily(u64),
}

/// A core's figures. `None` where no source is named: that metric gets no prediction.
#[derive(Debug, Clone, Copy)]
pub struct Core {
    /// The core's name ("Zen 3").
    pub name: &'static str,
    /// Which core of a hybrid CPU this entry describes ("performance"/"efficiency"), or
    /// None for single-kind CPUs.
    pub kind: Option<&'static str>,
    pub matches: &'static [Match],
    pub l1d_cycles: Option<Figure>,
    pub l2_cycles: Option<Figure>,
    pub l3_cycles: Option<Figure>,
    /// Idle load-to-use latency of DRAM with a full random chase, ns.
    pub dram_ns: Option<Figure>,
}

const INTEL_PAG: &str =
    "Intel, Performance Analysis Guide for Intel Core i7 Processor and Intel Xeon 5500 \
    processors (D. Levinthal, 2009), table of data source latencies: L1 ~4 cycles, L2 ~10 cycles, \
    L3 unshared line ~40 cycles, local DRAM ~60 ns";
const INTEL_ORM_SKL: &str = "Intel 64 and IA-32 Architectures Optimization Reference Manual (248966), \
    Skylake client microarchitecture, cache parameters table: L1 data 4 cycles (simple addressing), \
    L2 12 cycles";
const SEVEN_CPU_SKL: &str = "7-cpu.com, Intel Skylake (i7-6700): L3 cache latency 42 cycles";
const ANANDTECH_ROME: &str = "AnandTech, 'AMD Rome Second Generation EPYC Review' (2019-08-07), \
    Memory Subsystem: Latency: EPYC 7742 L1 4 cycles, L2 13 cycles, L3 ~34 cycles (avg), \
    128 MB full random ~122 ns (NPS1); Xeon 8280 L1 4, L2 14, L3 ~46 cycles (avg)";
const AMD_ZEN3: &str =
    "AnandTech, 'AMD Zen 3 Ryzen Deep Dive Review: 5950X, 5900X, 5800X and 5600X \
    Tested' (2020-11-05), cache hierarchy (AMD's figures): L1D 4 cycles, L2 12 cycles, \
    L3 46 cycles";
const CNC_ZEN4: &str = "Chips and Cheese, 'AMD's Zen 4 Part 2: Memory Subsystem and Conclusion' \
    (2022-11-08): L1D 4 cycles, L2 14 cycles";
const CNC_GLC: &str = "Chips and Cheese, 'Going Armchair Quarterback on Golden Cove's Caches' \
    (2022-02-11), Golden Cove baseline: L1D 5 cycles; Intel 64 and IA-32 Architectures \
    Optimization Reference Manual (248966), Golden Cove: L2 15 cycles";
const CNC_GRT: &str = "Chips and Cheese, 'Gracemont: Revenge of the Atom Cores' (2021-12-21): \
    L1D 3 cycles";
const CNC_SPR: &str = "Intel 64 and IA-32 Architectures Optimization Reference Manual (248966), \
    Sapphire Rapids (Golden Cove server core): L1D 5 cycles, L2 16 cycles";
const ARM_N1_SOG: &str = "Arm Neoverse N1 Software Optimization Guide (PJDOC-466751330), \
    load instructions: LDR (register offset, no writeback) execution latency 4 cycles";
const ARM_V1_SOG: &str = "Arm Neoverse V1 Software Optimization Guide (PJDOC-1505342170), \
    load instructions: LDR execution latency 4 cycles";
const ANANDTECH_M1: &str = "AnandTech, 'Apple Announces The Apple Silicon M1' (2020-11-10), \
    Firestorm: 128 KB L1D with 3-cycle load-to-use latency";

const fn fig(value: f64, reference: &'static str) -> Option<Figure> {
    Some(Figure { value, reference })
}

/// Every core the table knows. Sources are cited per figure; an absent figure has none.
pub const CORES: &[Core] = &[
    Core {
        name: "Nehalem",
        kind: None,
        // 26 Bloomfield/Gainestown, 30 Lynnfield (i7 860), 31, 46 Nehalem-EX.
        matches: &[Match::X86 {
            vendor: "GenuineIntel",
            family: 6,
            models: &[26, 30, 31, 46],
        }],
        l1d_cycles: fig(4.0, INTEL_PAG),
        l2_cycles: fig(10.0, INTEL_PAG),
        l3_cycles: fig(40.0, INTEL_PAG),
        dram_ns: fig(60.0, INTEL_PAG),
    },
    Core {
        name: "Skylake / Kaby Lake client",
        kind: None,
        // 78, 94 Skylake; 142, 158 Kaby Lake (and its Coffee/Whiskey Lake steppings).
        matches: &[
            Match::X86 {
                vendor: "GenuineIntel",
                family: 6,
                models: &[78, 94, 142, 158],
            },
            // CPUFAMILY_INTEL_SKYLAKE, CPUFAMILY_INTEL_KABYLAKE
            Match::MacFamily(0x37fc219f),
            Match::MacFamily(0x0f817246),
        ],
        l1d_cycles: fig(4.0, INTEL_ORM_SKL),
        l2_cycles: fig(12.0, INTEL_ORM_SKL),
        l3_cycles: fig(42.0, SEVEN_CPU_SKL),
        dram_ns: None,
    },
    Core {
        name: "Skylake-SP / Cascade Lake server",
        kind: None,
        matches: &[Match::X86 {
            vendor: "GenuineIntel",
            family: 6,
            models: &[85],
        }],
        l1d_cycles: fig(4.0, ANANDTECH_ROME),
        l2_cycles: fig(14.0, ANANDTECH_ROME),
        l3_cycles: fig(46.0, ANANDTECH_ROME),
        dram_ns: None,
    },
    Core {
        name: "Golden Cove (Alder Lake P-core)",
        kind: Some("performance"),
        // 151 Alder Lake-S, 154 Alder Lake-P/U (i7-1250U, i7-12700H).
        matches: &[Match::X86 {
            vendor: "GenuineIntel",
            family: 6,
            models: &[151, 154],
        }],
        l1d_cycles: fig(5.0, CNC_GLC),
        l2_cycles: fig(15.0, CNC_GLC),
        l3_cycles: None,
        dram_ns: None,
    },
    Core {
        name: "Gracemont (Alder Lake E-core)",
        kind: Some("efficiency"),
        matches: &[Match::X86 {
            vendor: "GenuineIntel",
            family: 6,
            models: &[151, 154],
        }],
        l1d_cycles: fig(3.0, CNC_GRT),
        l2_cycles: None,
        l3_cycles: None,
        dram_ns: None,
    },
    Core {
        name: "Sapphire Rapids (Golden Cove server)",
        kind: None,
        matches: &[Match::X86 {
            vendor: "GenuineIntel",
            family: 6,
            models: &[143],
        }],
        l1d_cycles: fig(5.0, CNC_SPR),
        l2_cycles: fig(16.0, CNC_SPR),
        l3_cycles: None,
        dram_ns: None,
    },
    Core {
        name: "Zen 2",
        kind: None,
        // 49 Rome, 96 Renoir, 104 Lucienne, 113 Matisse, 144 Van Gogh.
        matches: &[Match::X86 {
            vendor: "AuthenticAMD",
            family: 23,
            models: &[49, 96, 104, 113, 144],
        }],
        l1d_cycles: fig(4.0, ANANDTECH_ROME),
        l2_cycles: fig(13.0, ANANDTECH_ROME),
        l3_cycles: fig(34.0, ANANDTECH_ROME),
        dram_ns: None,
    },
    Core {
        name: "Zen 3",
        kind: None,
        // 1 Milan, 8 Chagall, 33 Vermeer, 68 Rembrandt, 80 Cezanne.
        matches: &[Match::X86 {
            vendor: "AuthenticAMD",
            family: 25,
            models: &[1, 8, 33, 68, 80],
        }],
        l1d_cycles: fig(4.0, AMD_ZEN3),
        l2_cycles: fig(12.0, AMD_ZEN3),
        l3_cycles: fig(46.0, AMD_ZEN3),
        dram_ns: None,
    },
    Core {
        name: "Zen 4",
        kind: None,
        // 17 Genoa, 24 Storm Peak, 97 Raphael, 116/120 Phoenix, 160 Bergamo/Siena.
        matches: &[Match::X86 {
            vendor: "AuthenticAMD",
            family: 25,
            models: &[17, 24, 97, 116, 120, 160],
        }],
        l1d_cycles: fig(4.0, CNC_ZEN4),
        l2_cycles: fig(14.0, CNC_ZEN4),
        l3_cycles: None,
        dram_ns: None,
    },
    Core {
        name: "Apple M1 / M2 (Firestorm / Avalanche P-core)",
        kind: Some("performance"),
        matches: &[
            Match::AppleChip("Apple M1"),
            Match::AppleChip("Apple M2"),
            // CPUFAMILY_ARM_FIRESTORM_ICESTORM
            Match::MacFamily(0x1b588bb3),
        ],
        l1d_cycles: fig(3.0, ANANDTECH_M1),
        l2_cycles: None,
        l3_cycles: None,
        dram_ns: None,
    },
    Core {
        name: "Neoverse N1 (Graviton 2, Ampere Altra)",
        kind: None,
        matches: &[Match::Arm {
            implementer: "0x41",
            part: "0xd0c",
        }],
        l1d_cycles: fig(4.0, ARM_N1_SOG),
        l2_cycles: None,
        l3_cycles: None,
        dram_ns: None,
    },
    Core {
        name: "Neoverse V1 (Graviton 3)",
        kind: None,
        matches: &[Match::Arm {
            implementer: "0x41",
            part: "0xd40",
        }],
        l1d_cycles: fig(4.0, ARM_V1_SOG),
        l2_cycles: None,
        l3_cycles: None,
        dram_ns: None,
    },
];

/// The key a machine is looked up by, as text ("x86 AuthenticAMD family 25 model 1").
pub fn key_of(m: &Machine) -> String {
    let p = &m.cpu.part;
    if let (Some(i), Some(part)) = (&p.arm_implementer, &p.arm_part) {
        return format!("arm64 implementer {i} part {part}");
    }
    if m.cpu.model.starts_with("Apple M") {
        return format!("Apple chip '{}'", m.cpu.model);
    }
    if let (Some(f), Some(mo)) = (p.family, p.model) {
        return format!("x86 {} family {f} model {mo}", m.cpu.vendor);
    }
    if let Some(cf) = p.cpufamily {
        return format!("macOS hw.cpufamily {cf:#x}");
    }
    format!(
        "'{}' (no CPUID family/model, MIDR or chip name recorded)",
        m.cpu.model
    )
}

fn matches(m: &Machine, w: &Match) -> bool {
    let p = &m.cpu.part;
    match *w {
        Match::X86 {
            vendor,
            family,
            models,
        } => {
            m.cpu.vendor == vendor
                && p.family == Some(family)
                && p.model.is_some_and(|mo| models.contains(&mo))
        }
        Match::Arm { implementer, part } => {
            p.arm_implementer.as_deref() == Some(implementer) && p.arm_part.as_deref() == Some(part)
        }
        Match::AppleChip(prefix) => m.cpu.model.starts_with(prefix),
        Match::MacFamily(f) => p.cpufamily == Some(f),
    }
}

/// The kind of core the run measures on: the chosen CPU's, on a hybrid CPU.
fn measured_kind(m: &Machine) -> Option<&str> {
    let chosen = m.topology.chosen_cpu?;
    m.topology
        .cpus
        .iter()
        .find(|c| c.cpu == chosen)?
        .kind
        .as_deref()
}

/// The table entry for this machine's measured core and the key it matched, or why none.
pub fn core(m: &Machine) -> Result<(&'static Core, String), String> {
    let key = key_of(m);
    let kind = measured_kind(m).unwrap_or("performance");
    let found: Vec<&Core> = CORES
        .iter()
        .filter(|c| c.matches.iter().any(|w| matches(m, w)))
        .collect();
    let pick = match found.as_slice() {
        [] => None,
        [one] => Some(*one),
        many => many
            .iter()
            .copied()
            .find(|c| c.kind.is_none() || c.kind == Some(kind)),
    };
    match pick {
        Some(c) => Ok((c, format!("{key}: {}", c.name))),
        None => Err(format!("the parts table has no entry for {key}")),
    }
}

/// Picks one figure of a core's entry.
pub type Pick = fn(&Core) -> Option<Figure>;

/// A figure of this machine's core: (value, key, reference), or why there is none.
pub fn figure(
    m: &Machine,
    what: &str,
    pick: impl Fn(&Core) -> Option<Figure>,
) -> Result<(f64, String, &'static str), String> {
    let (c, key) = core(m)?;
    match pick(c) {
        Some(f) => Ok((f.value, key, f.reference)),
        None => Err(format!(
            "the parts table names no published {what} for {key}"
        )),
    }
}
