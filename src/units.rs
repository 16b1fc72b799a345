//! Parsing and formatting of sizes, times and rates.

/// Parses a byte size such as `4096`, `4K`, `4KiB`, `1M`, `1.5GiB`, `2GB`.
/// K/M/G/T and KiB/MiB/... are powers of 1024; KB/MB/GB/TB are powers of 1000.
/// Zero, negative, fractional byte counts and garbage are errors.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size".into());
    }
    if t.starts_with('-') {
        return Err(format!("size '{s}' is negative"));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| {
        format!("size '{s}' is not a number with an optional unit (e.g. 4K, 1M, 1GiB)")
    })?;
    let mult: f64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024f64.powi(2),
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(format!(
                "unknown unit '{other}' in size '{s}' (use B, K, M, G, T, KiB.., KB..)"
            ))
        }
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size '{s}' is too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(format!("size '{s}' is not a whole number of bytes"));
    }
    if bytes == 0.0 {
        return Err(format!("size '{s}' is zero"));
    }
    Ok(bytes as u64)
}

/// Parses a duration such as `500ms`, `5s`, `1.5s`, `2m`, `100us`, `250000ns`; a bare
/// number is seconds. Zero, negative and garbage are errors.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if t.starts_with('-') {
        return Err(format!("duration '{s}' is negative"));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("duration '{s}' is not a number with a unit (e.g. 500ms, 5s, 2m)"))?;
    let secs_per: f64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "s" | "sec" => 1.0,
        "ms" => 1e-3,
        "us" | "\u{b5}s" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown unit '{other}' in duration '{s}' (use ns, us, ms, s, m, h)"
            ))
        }
    };
    let secs = value * secs_per;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("duration '{s}' is too large"));
    }
    if secs <= 0.0 {
        return Err(format!("duration '{s}' is zero"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// Bytes with a binary unit: "512 B", "4.0 KiB", "1.5 GiB".
pub fn fmt_bytes(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v.abs() >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", units[0])
    } else {
        format!("{v:.1} {}", units[i])
    }
}

/// Nanoseconds with a fitting unit: "23.4 ns", "1.20 us", "3.4 ms", "1.2 s".
pub fn fmt_ns(ns: f64) -> String {
    let a = ns.abs();
    if !ns.is_finite() {
        "-".into()
    } else if a < 10.0 {
        format!("{ns:.2} ns")
    } else if a < 1e3 {
        format!("{ns:.1} ns")
    } else if a < 1e6 {
        format!("{:.2} us", ns / 1e3)
    } else if a < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Bytes per second, decimal and binary both: "12.3 GB/s (11.5 GiB/s)".
pub fn fmt_bandwidth(bps: f64) -> String {
    format!("{:.2} GB/s ({:.2} GiB/s)", bps / 1e9, bps / 1024f64.powi(3))
}

/// A value in a canonical unit, formatted for people.
pub fn fmt_value(v: f64, unit: &str) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    match unit {
        "ns" => fmt_ns(v),
        "bytes" => fmt_bytes(v),
        "bytes/s" => fmt_bandwidth(v),
        "1/s" => format!("{}/s", fmt_si(v)),
        "ratio" => format!("{v:.2}x"),
        "Hz" => format!("{:.3} GHz", v / 1e9),
        "cycles" => format!("{v:.1} cycles"),
        "bits/s" => format!("{:.2} Gbit/s", v / 1e9),
        _ => format!("{} {unit}", fmt_si(v)),
    }
}

/// Plain number with SI suffix: 1.23k, 4.56M.
pub fn fmt_si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// `from`, 2 `from`, 4 `from` ... up to `to` (both included when powers of two apart;
/// empty when `from` is 0 or above `to`; stops before overflowing).
pub fn doublings(from: u64, to: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = from;
    while s != 0 && s <= to {
        v.push(s);
        match s.checked_mul(2) {
            Some(n) => s = n,
            None => break,
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubling_sizes() {
        assert_eq!(doublings(1, 8), vec![1, 2, 4, 8]);
        assert_eq!(doublings(3, 2), Vec::<u64>::new());
        assert_eq!(doublings(0, 8), Vec::<u64>::new());
        assert_eq!(doublings(1 << 63, u64::MAX), vec![1 << 63]);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5K").unwrap(), 1536);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        for bad in ["0", "-1", "-4K", "", "abc", "4Q", "1.3", "0K", "K", "1e99T"] {
            assert!(parse_size(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        for bad in ["0", "0s", "-1s", "", "abc", "5q", "s", "1e99h"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_bytes(4096.0), "4.0 KiB");
        assert_eq!(fmt_ns(1500.0), "1.50 us");
        assert!(fmt_bandwidth(1e10).contains("10.00 GB/s"));
    }
}
