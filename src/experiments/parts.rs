//! The parts table: published load-to-use latencies per CPU core, each with its reference
//! (checked against the source text, never against a measurement of ours), how the source
//! obtained it (`Kind`) and the clock it counts (`Unit`). None of the kinds counts a page
//! walk. A part or figure not here gives no prediction, with the reason; never a
//! "typical" number, and never a figure composed from two sources.

use crate::machine::Machine;
use Kind::*;

/// How a source obtained its figure (`label`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    HugePageChase,
    Chase,
    /// AnandTech's: a chase on 4 KiB pages with the TLB misses estimated and removed.
    Structural,
    Nominal,
    Simulator,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::HugePageChase => "a chase measured on huge pages",
            Kind::Chase => "a chase measurement, page size not stated",
            Kind::Structural => "a structural estimate, TLB misses removed",
            Kind::Nominal => "the vendor's nominal figure",
            Kind::Simulator => "a simulator's parameter, not a measurement",
        }
    }
}

/// The clock a figure counts: the core's, or the uncore's (ring or mesh: Intel's L3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    CoreCycles,
    UncoreCycles,
    Ns,
}

#[derive(Debug, Clone, Copy)]
pub struct Cited {
    pub value: f64,
    pub kind: Kind,
    pub unit: Unit,
    pub reference: &'static str,
    /// Another published figure for the same level that this one contradicts.
    pub disputed: Option<&'static str>,
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

/// A core's figures, `None` where no source text states one.
#[derive(Debug, Clone, Copy)]
pub struct Core {
    pub name: &'static str,
    /// "performance" or "efficiency" on a hybrid CPU.
    pub kind: Option<&'static str>,
    pub matches: &'static [Match],
    pub l1d_cycles: Option<Cited>,
    pub l2_cycles: Option<Cited>,
    pub l3_cycles: Option<Cited>,
    /// Idle load-to-use latency of DRAM with a full random chase, ns.
    pub dram_ns: Option<Cited>,
}

const INTEL_PAG: &str =
    "Intel, Performance Analysis Guide for Intel Core i7 Processor and Intel Xeon 5500 \
    processors (D. Levinthal, 2009), table of data source latencies: L1 ~4 cycles, L2 ~10 cycles, \
    L3 unshared line ~40 cycles, local DRAM ~60 ns";
const ANANDTECH_SKX: &str = "AnandTech, 'The Intel Skylake-X Review: Core i9 7900X, i7 7820X and \
    i7 7800X Tested', page 'I Keep My Cache Private', table 'Comparison: Skylake-S and \
    Skylake-SP Caches', Skylake-S column: L1-D 32 KB 8-way 4-cycle; L3 < 2 MB/core 44-cycle \
    (https://www.anandtech.com/show/11550/the-intel-skylakex-review-core-i9-7900x-i7-7820x-and-i7-7800x-tested/4)";
const CNC_RPL_L2: &str = "Chips and Cheese, 'A Preview of Raptor Lake's Improved L2 Caches' \
    (2022-08-23), table 'L2 Setup / L2 Latency': Skylake (Client) 256 KB 4-Way 12 cycles; \
    Golden Cove (Client) 1280 KB 10-Way 15 cycles \
    (https://chipsandcheese.com/2022/08/23/a-preview-of-raptor-lakes-improved-l2-caches/)";
const ANANDTECH_ROME: &str = "AnandTech, 'AMD Rome Second Generation EPYC Review' (2019-08-07), \
    Memory Subsystem: Latency (\"estimated structural latency\", TLB misses accounted for and \
    disregarded): EPYC 7742 L1 4 cycles, L2 13 cycles, L3 ~34 cycles (avg), 128 MB full \
    random ~122 ns (NPS1); Xeon 8280 L1 4, L2 14, L3 ~46 cycles (avg)";
const SKX_L3_77: &str = "AnandTech's Skylake-X review, table 'Comparison: Skylake-S and \
    Skylake-SP Caches', gives Skylake-SP's L3 as 77-cycle, against the Rome review's ~46 \
    (structural)";
const CNC_GLC: &str = "Chips and Cheese, 'Going Armchair Quarterback on Golden Cove's Caches' \
    (2022-02-11), table of the simulation's 'Golden Cove' Baseline L1 Data Cache: Latency 5 cycles, Capacity 48 KB \
    (https://chipsandcheese.com/2022/02/11/going-armchair-quarterback-on-golden-coves-caches/)";
const CNC_MTL_ZEN4: &str = "Chips and Cheese, Meteor Lake core types tested at CES (2024), \
    section 'P-Core Cache and Memory Access': \"Zen 4's 32 KB L1D cache has 4 cycle latency. AMD \
    then uses a 1 MB L2 with 14 cycle latency\" (read at the feed copy \
    https://chips2873.rssing.com/chan-79114813/article174.html)";

const AMD_SOG_19H: &str = "AMD, Software Optimization Guide for AMD Family 19h Processors \
    (pub. 56665), 2.12 L1 Data Cache: the AGU and LS pipelines, optimized for simple address \
    generation modes, \"can achieve 4-cycle load-to-use integer load latency\" (2.6.2: \"The L1 \
    data cache has a 4- or 5- cycle integer load-to-use latency\"); a chase's load is the \
    simple mode. Quoted from the guide in LLVM's llvm/lib/Target/X86/X86ScheduleZnver3.td \
    (https://github.com/llvm/llvm-project/blob/main/llvm/lib/Target/X86/X86ScheduleZnver3.td)";

const CNC_5800X3D: &str = "Chips and Cheese, 'AMD's 7950X3D: Zen 4 Gets VCache' (2023-04-23), \
    opening table: \"2020: AMD Ryzen 5800X3D at 4.5 GHz L1: 32 KB Data, 4 cycle latency L2: 512 KB, \
    12 cycle latency\"; \"All cycle count latencies are measured latencies using our memory \
    latency tool\" (a Zen 3 core; its stacked cache is L3 only) \
    (https://chipsandcheese.com/2023/04/23/amds-7950x3d-zen-4-gets-vcache/)";

const ANANDTECH_GRAVITON2: &str = "AnandTech, 'Cloud Clash: Amazon Graviton2 Arm Against \
    Intel and AMD', page 'Memory Subsystem & Latency' (Graviton2, 64 Neoverse N1 cores): \
    \"we see the N1 cores' advantage in the doubled 64KB L1D cache. Access latencies between \
    the different cores should be 4 cycles\"; \"The L2 cache of the Graviton2 falls in at 1MB \
    and the access latency here is also competitive at 11 cycles\"; \"we're accounting for TLB \
    misses in our patterns with 4KB pages\" (read at \
    http://labs.anandtech.com/Show/Index/15578?cPage=7&all=False&sort=0&page=3&slug=cloud-clash-amazon-graviton2-arm-against-intel-and-amd)";
const fn cited(value: f64, kind: Kind, unit: Unit, reference: &'static str) -> Cited {
    Cited {
        value,
        kind,
        unit,
        reference,
        disputed: None,
    }
}

/// A figure in core cycles.
const fn cyc(value: f64, kind: Kind, reference: &'static str) -> Cited {
    cited(value, kind, Unit::CoreCycles, reference)
}

/// A figure in cycles of the uncore clock (ring or mesh), which osmeter does not read.
const fn uncore(value: f64, kind: Kind, reference: &'static str) -> Cited {
    cited(value, kind, Unit::UncoreCycles, reference)
}

impl Cited {
    const fn disputed(self, by: &'static str) -> Cited {
        Cited {
            disputed: Some(by),
            ..self
        }
    }
}

/// `N` consecutive CPUID models from `first`.
const fn span<const N: usize>(first: u32) -> [u32; N] {
    let mut models = [0; N];
    let mut i = 0;
    while i < N {
        models[i] = first + i as u32;
        i += 1;
    }
    models
}

/// Model ranges of AMD's Zen generations as Linux's `bsp_init_amd`
/// (arch/x86/kernel/cpu/amd.c, "Figure out Zen generations") sets X86_FEATURE_ZEN2/3/4:
/// family 0x17 models 0x30 ... 0x4f are Zen 2, family 0x19 models 0x00 ... 0x0f Zen 3
/// and 0x10 ... 0x1f Zen 4. The server parts sit in these ranges (Rome 0x31, Milan
/// 0x01, Genoa 0x11). V-Cache parts (Milan-X, Genoa-X) have a larger L3, 4 cycles
/// slower (Chips and Cheese, 'Genoa-X: Server V-Cache Round 2'); no source read gives
/// them a model of their own, so an L3 figure here may meet one.
const ZEN2_MODELS_0X30: [u32; 16] = span(0x30);
const ZEN3_MODELS_0X00: [u32; 16] = span(0x00);
const ZEN4_MODELS_0X10: [u32; 16] = span(0x10);

const fn intel(models: &'static [u32]) -> Match {
    Match::X86 {
        vendor: "GenuineIntel",
        family: 6,
        models,
    }
}

const fn amd(family: u32, models: &'static [u32]) -> Match {
    Match::X86 {
        vendor: "AuthenticAMD",
        family,
        models,
    }
}

/// An Arm Ltd (implementer 0x41) design.
const fn arm(part: &'static str) -> Match {
    Match::Arm {
        implementer: "0x41",
        part,
    }
}

impl Core {
    const fn new(name: &'static str, matches: &'static [Match]) -> Core {
        Core {
            name,
            kind: None,
            matches,
            l1d_cycles: None,
            l2_cycles: None,
            l3_cycles: None,
            dram_ns: None,
        }
    }

    const fn kind(mut self, kind: &'static str) -> Core {
        self.kind = Some(kind);
        self
    }

    const fn l1d(mut self, f: Cited) -> Core {
        self.l1d_cycles = Some(f);
        self
    }

    const fn l2(mut self, f: Cited) -> Core {
        self.l2_cycles = Some(f);
        self
    }

    const fn l3(mut self, f: Cited) -> Core {
        self.l3_cycles = Some(f);
        self
    }

    const fn dram(mut self, f: Cited) -> Core {
        self.dram_ns = Some(f);
        self
    }
}

pub const CORES: &[Core] = &[
    // 26 Bloomfield/Gainestown, 30 Lynnfield (i7 860), 31, 46 Nehalem-EX.
    Core::new("Nehalem", &[intel(&[26, 30, 31, 46])])
        .l1d(cyc(4.0, Nominal, INTEL_PAG))
        .l2(cyc(10.0, Nominal, INTEL_PAG))
        .l3(uncore(40.0, Nominal, INTEL_PAG))
        .dram(cited(60.0, Nominal, Unit::Ns, INTEL_PAG)),
    Core::new(
        "Skylake / Kaby Lake client",
        &[
            // 78, 94 Skylake; 142, 158 Kaby Lake (and its Coffee/Whiskey Lake steppings).
            intel(&[78, 94, 142, 158]),
            // CPUFAMILY_INTEL_SKYLAKE, CPUFAMILY_INTEL_KABYLAKE
            Match::MacFamily(0x37fc219f),
            Match::MacFamily(0x0f817246),
        ],
    )
    .l1d(cyc(4.0, Nominal, ANANDTECH_SKX))
    .l2(cyc(12.0, HugePageChase, CNC_RPL_L2))
    .l3(uncore(44.0, Nominal, ANANDTECH_SKX)),
    // 0x55, INTEL_FAM6_SKYLAKE_X of Linux's intel-family.h, which notes Cascade Lake
    // (stepping 7) and Cooper Lake (stepping 11) under the same model.
    Core::new("Skylake-SP / Cascade Lake server", &[intel(&[85])])
        .l1d(cyc(4.0, Structural, ANANDTECH_ROME))
        .l2(cyc(14.0, Structural, ANANDTECH_ROME))
        .l3(uncore(46.0, Structural, ANANDTECH_ROME).disputed(SKX_L3_77)),
    // 151 Alder Lake-S, 154 Alder Lake-P/U (i7-1250U, i7-12700H). No measurement of its
    // L1D was found in the sources read.
    Core::new("Golden Cove (Alder Lake P-core)", &[intel(&[151, 154])])
        .kind("performance")
        .l1d(cyc(5.0, Simulator, CNC_GLC))
        .l2(cyc(15.0, HugePageChase, CNC_RPL_L2)),
    // No L1D figure: the cited source states none.
    Core::new("Gracemont (Alder Lake E-core)", &[intel(&[151, 154])]).kind("efficiency"),
    // 0x6a INTEL_FAM6_ICELAKE_X (server parts) and 0x6c INTEL_FAM6_ICELAKE_D (micro
    // server parts), both "Sunny Cove" in Linux's intel-family.h; no source read says
    // whether the D parts' caches are the X parts'. No figures: no source text read
    // states Ice Lake-SP's load-to-use latencies.
    Core::new("Ice Lake-SP (Sunny Cove server)", &[intel(&[106, 108])]),
    // 0x8f INTEL_FAM6_SAPPHIRERAPIDS_X, "Golden Cove", in Linux's intel-family.h.
    // No figures: no source text read states them; the client Golden Cove's are
    // not the server core's (its L2 is 2 MB, not 1.25 MB).
    Core::new("Sapphire Rapids (Golden Cove server)", &[intel(&[143])]),
    // 0xcf INTEL_FAM6_EMERALDRAPIDS_X in Linux's intel-family.h.
    // No figures: no source read states a load-to-use latency for Emerald Rapids.
    Core::new("Emerald Rapids (Raptor Cove server)", &[intel(&[207])]),
    // 0x30 ... 0x3f (49 Rome), 96 Renoir, 104 Lucienne, 113 Matisse, 144 Van Gogh.
    Core::new(
        "Zen 2",
        &[amd(23, &ZEN2_MODELS_0X30), amd(23, &[96, 104, 113, 144])],
    )
    .l1d(cyc(4.0, Structural, ANANDTECH_ROME))
    .l2(cyc(13.0, Structural, ANANDTECH_ROME))
    .l3(cyc(34.0, Structural, ANANDTECH_ROME)),
    // 0x00 ... 0x0f (1 Milan, 8 Chagall), 33 Vermeer, 68 Rembrandt, 80 Cezanne.
    // No L3 figure: the one measured Zen 3 L3 read (the 5800X3D's 49 cycles) is a
    // V-Cache part's, and these models hold parts with and without V-Cache.
    Core::new(
        "Zen 3",
        &[amd(25, &ZEN3_MODELS_0X00), amd(25, &[33, 68, 80])],
    )
    .l1d(cyc(4.0, Nominal, AMD_SOG_19H))
    .l2(cyc(12.0, Chase, CNC_5800X3D)),
    // 0x10 ... 0x1f (17 Genoa, 24 Storm Peak), 97 Raphael, 116/120 Phoenix,
    // 160 Bergamo/Siena. No L3 figure: no source text read states Zen 4's L3 latency
    // in cycles.
    Core::new(
        "Zen 4",
        &[amd(25, &ZEN4_MODELS_0X10), amd(25, &[97, 116, 120, 160])],
    )
    .l1d(cyc(4.0, HugePageChase, CNC_MTL_ZEN4))
    .l2(cyc(14.0, HugePageChase, CNC_MTL_ZEN4)),
    // No L1D figure: the cited source states none.
    Core::new(
        "Apple M1 / M2 (Firestorm / Avalanche P-core)",
        &[
            Match::AppleChip("Apple M1"),
            Match::AppleChip("Apple M2"),
            // CPUFAMILY_ARM_FIRESTORM_ICESTORM
            Match::MacFamily(0x1b588bb3),
        ],
    )
    .kind("performance"),
    // ARM_CPU_PART_NEOVERSE_N1 0xD0C of Linux's arch/arm64/include/asm/cputype.h. The
    // core's figures, read for Graviton2. No L3 figure: the source read gives the
    // last-level cache in ns only. No DRAM figure: it is the memory system's, not the
    // core's, and this MIDR matches Graviton2 and Ampere Altra alike.
    Core::new("Neoverse N1 (Graviton 2, Ampere Altra)", &[arm("0xd0c")])
        .l1d(cyc(4.0, Structural, ANANDTECH_GRAVITON2))
        .l2(cyc(11.0, Structural, ANANDTECH_GRAVITON2)),
    // ARM_CPU_PART_NEOVERSE_V1 0xD40 of Linux's arch/arm64/include/asm/cputype.h. No L1D
    // figure: Arm's guide states no LDR latency. No source read states Graviton 3's L2,
    // L3 or DRAM latency either.
    Core::new("Neoverse V1 (Graviton 3)", &[arm("0xd40")]),
];

/// The key a machine is looked up by, as text ("x86 AuthenticAMD family 25 model 1").
pub fn key_of(m: &Machine) -> String {
    let (p, model) = (&m.cpu.part, &m.cpu.model);
    if let (Some(i), Some(part)) = (&p.arm_implementer, &p.arm_part) {
        return format!("arm64 implementer {i} part {part}");
    }
    if model.starts_with("Apple M") {
        return format!("Apple chip '{model}'");
    }
    if let (Some(f), Some(mo)) = (p.family, p.model) {
        return format!("x86 {} family {f} model {mo}", m.cpu.vendor);
    }
    if let Some(cf) = p.cpufamily {
        return format!("macOS hw.cpufamily {cf:#x}");
    }
    format!("'{model}' (no CPUID family/model, MIDR or chip name recorded)")
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

/// The table entry for this machine's measured core and the key it matched, or why none.
pub fn core(m: &Machine) -> Result<(&'static Core, String), String> {
    let key = key_of(m);
    let t = &m.topology;
    let chosen = t.chosen_cpu.and_then(|c| t.place(c));
    let kind = chosen
        .and_then(|c| c.kind.as_deref())
        .unwrap_or("performance");
    let found: Vec<&Core> = CORES
        .iter()
        .filter(|c| c.matches.iter().any(|w| matches(m, w)))
        .collect();
    // An entry for one kind of core never stands for the other (an E-core's figures are
    // not a P-core's).
    match found
        .iter()
        .find(|c| c.kind.is_none() || c.kind == Some(kind))
    {
        Some(c) => Ok((*c, format!("{key}: {}", c.name))),
        None if !found.is_empty() => Err(format!(
            "the parts table has no {kind}-core entry for {key} (only {})",
            found.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
        )),
        None => Err(format!("the parts table has no entry for {key}")),
    }
}

pub type Pick = fn(&Core) -> Option<Cited>;

/// A figure of this machine's core and the key it matched, or why there is none.
pub fn figure(m: &Machine, what: &str, pick: Pick) -> Result<(Cited, String), String> {
    let (c, key) = core(m)?;
    let f =
        pick(c).ok_or_else(|| format!("the parts table names no published {what} for {key}"))?;
    Ok((f, key))
}
