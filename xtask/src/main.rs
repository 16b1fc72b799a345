//! osmeter's maintenance tasks, run as `cargo xtask TASK` (the alias is in .cargo/config.toml).
//!
//! `cargo xtask dist` makes the release under target/dist/: for x86-64 and aarch64 Linux a
//! tar.gz (binary, man page, shell completions, README, licence), a .deb wrapping the same
//! files, and SHA256SUMS. The binaries are linked against glibc 2.17 with cargo-zigbuild,
//! so they start on RHEL/CentOS 7, Amazon Linux 2, Ubuntu 16.04 and anything newer; the task
//! checks that floor with objdump before packing. What it needs and a fresh machine lacks it
//! installs: ziglang and cargo-zigbuild from PyPI into a venv under target/, the Rust targets
//! with rustup, and (as root on Debian) python3-venv, binutils and dpkg with apt-get.
//!
//! `cargo xtask glibc-floor FILE...` checks only the floor of binaries already built.

use std::collections::BTreeMap;
use std::env;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// The targets released: Rust triple and Debian architecture.
const TARGETS: [(&str, &str); 2] = [
    ("x86_64-unknown-linux-gnu", "amd64"),
    ("aarch64-unknown-linux-gnu", "arm64"),
];
/// The oldest glibc the binaries may need (RHEL/CentOS 7).
const GLIBC_FLOOR: (u32, u32) = (2, 17);
/// The PyPI packages that cross-link against an old glibc, pinned to the versions tested.
const PIP_PACKAGES: [&str; 2] = ["ziglang==0.17.1", "cargo-zigbuild==0.24.1"];

type Result<T> = std::result::Result<T, String>;

const USAGE: &str = "usage: cargo xtask dist | cargo xtask glibc-floor FILE...

  dist         build the release under target/dist/: osmeter-VERSION-TARGET.tar.gz and
               osmeter_VERSION-1_ARCH.deb for x86_64 and aarch64 Linux, and SHA256SUMS
  glibc-floor  fail when a binary needs a glibc symbol newer than 2.17 (objdump -T)";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("dist") if args.len() == 1 => dist(),
        Some("glibc-floor") if args.len() > 1 => args[1..]
            .iter()
            .try_for_each(|f| glibc_floor(Path::new(f)).map(|_| ())),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Whether `cmd` is an executable on PATH.
fn on_path(cmd: &str) -> bool {
    env::var_os("PATH").is_some_and(|p| {
        env::split_paths(&p).any(|d| {
            fs::metadata(d.join(cmd))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Runs `cmd`, failing with its name and status (its own output already went to the terminal).
fn run(cmd: &mut Command) -> Result<()> {
    let name = format!("{:?}", cmd.get_program());
    let st = cmd
        .status()
        .map_err(|e| format!("could not start {name}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{} failed ({st})", describe(cmd)))
    }
}

/// Runs `cmd` and returns its standard output.
fn output(cmd: &mut Command) -> Result<Vec<u8>> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not start {:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!("{} failed ({})", describe(cmd), out.status))
    }
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// Makes sure the Debian package tools are there: as root with apt-get, installs the
/// missing ones; otherwise one line that names the package to install.
fn require_tools(tools: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&(&str, &str)> = tools.iter().filter(|(c, _)| !on_path(c)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let pkgs: Vec<&str> = missing.iter().map(|(_, p)| *p).collect();
    if is_root() && on_path("apt-get") {
        eprintln!("xtask: installing {} with apt-get", pkgs.join(" "));
        run(Command::new("apt-get").args(["update", "-qq"]))?;
        run(Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&pkgs)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null()))?;
        if let Some((c, p)) = tools.iter().find(|(c, _)| !on_path(c)) {
            return Err(format!("{c} is still missing after apt-get install {p}"));
        }
        return Ok(());
    }
    let (c, p) = missing[0];
    Err(format!(
        "{c} not found: install {p} (Debian/Ubuntu: apt-get install {})",
        pkgs.join(" ")
    ))
}

fn package_version(root: &Path) -> Result<String> {
    let toml = fs::read_to_string(root.join("Cargo.toml"))
        .map_err(|e| format!("cannot read Cargo.toml: {e}"))?;
    let mut in_package = false;
    for line in toml.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_package = l == "[package]";
        } else if in_package {
            if let Some(v) = l.strip_prefix("version") {
                let v = v
                    .trim_start()
                    .trim_start_matches('=')
                    .trim()
                    .trim_matches('"');
                return Ok(v.to_string());
            }
        }
    }
    Err("no version in Cargo.toml's [package]".into())
}

/// The venv under target/ with cargo-zigbuild and zig, made on first use; its bin folder.
fn zig_tools(root: &Path) -> Result<PathBuf> {
    let venv = root.join("target/dist-tools/venv");
    let bin = venv.join("bin");
    let stamp = venv.join("osmeter-packages");
    let want = PIP_PACKAGES.join(" ");
    if fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == want)
        && bin.join("cargo-zigbuild").exists()
    {
        return Ok(bin);
    }
    require_tools(&[("python3", "python3")])?;
    let make = |quiet: bool| {
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&venv)
            .stderr(if quiet {
                Stdio::null()
            } else {
                Stdio::inherit()
            })
            .status()
            .is_ok_and(|s| s.success())
    };
    if !make(true) {
        // Debian's python3 lacks ensurepip until python3-venv is installed.
        if is_root() && on_path("apt-get") {
            eprintln!("xtask: installing python3-venv with apt-get");
            run(Command::new("apt-get").args(["update", "-qq"]))?;
            run(Command::new("apt-get")
                .args([
                    "install",
                    "-y",
                    "-qq",
                    "--no-install-recommends",
                    "python3-venv",
                ])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdout(Stdio::null()))?;
        }
        if !make(false) {
            return Err(
                "python3 -m venv failed: install python3-venv (apt-get install python3-venv)"
                    .into(),
            );
        }
    }
    eprintln!("xtask: installing {want} from PyPI into {}", venv.display());
    run(Command::new(bin.join("pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(PIP_PACKAGES))
    .map_err(|e| format!("{e}: cargo-zigbuild and zig come from PyPI, which must be reachable"))?;
    fs::write(&stamp, format!("{want}\n")).map_err(|e| e.to_string())?;
    Ok(bin)
}

/// Adds the Rust targets with rustup, or checks that the toolchain has them.
fn rust_targets() -> Result<()> {
    if on_path("rustup") {
        for (t, _) in TARGETS {
            run(Command::new("rustup")
                .args(["target", "add", t])
                .stdout(Stdio::null())
                .stderr(Stdio::null()))
            .map_err(|_| format!("rustup target add {t} failed"))?;
        }
        return Ok(());
    }
    let sysroot = output(Command::new("rustc").args(["--print", "sysroot"]))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot).trim());
    for (t, _) in TARGETS {
        if !sysroot.join("lib/rustlib").join(t).exists() {
            return Err(format!(
                "the Rust standard library for {t} is missing: rustup target add {t}"
            ));
        }
    }
    Ok(())
}

/// The highest GLIBC_x.y version `bin` needs (objdump -T); fails above the floor.
fn glibc_floor(bin: &Path) -> Result<(u32, u32)> {
    require_tools(&[("objdump", "binutils")])?;
    if !bin.is_file() {
        return Err(format!("{}: no such file", bin.display()));
    }
    let out = output(Command::new("objdump").arg("-T").arg(bin))?;
    let text = String::from_utf8_lossy(&out);
    let mut max = (0, 0);
    let mut worst = String::new();
    for line in text.lines() {
        let Some(i) = line.find("GLIBC_") else {
            continue;
        };
        let v: String = line[i + 6..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let mut it = v.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
        let ver = (it.next().unwrap_or(0), it.next().unwrap_or(0));
        if ver > max {
            max = ver;
            worst = line.split_whitespace().last().unwrap_or("").to_string();
        }
    }
    if max > GLIBC_FLOOR {
        return Err(format!(
            "{} needs GLIBC_{}.{} (symbol {worst}), above the floor GLIBC_{}.{}",
            bin.display(),
            max.0,
            max.1,
            GLIBC_FLOOR.0,
            GLIBC_FLOOR.1
        ));
    }
    if max == (0, 0) {
        println!(
            "{}: no versioned glibc symbol (static or not glibc)",
            bin.display()
        );
    } else {
        println!(
            "{}: highest glibc symbol version GLIBC_{}.{} (floor {}.{})",
            bin.display(),
            max.0,
            max.1,
            GLIBC_FLOOR.0,
            GLIBC_FLOOR.1
        );
    }
    Ok(max)
}

/// The Rust triple of this machine's architecture, when a released binary runs here.
fn host_target() -> Option<&'static str> {
    TARGETS
        .iter()
        .map(|(t, _)| *t)
        .find(|t| cfg!(target_os = "linux") && t.starts_with(env::consts::ARCH))
}

fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    if let Some(d) = path.parent() {
        fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    fs::write(path, data).map_err(|e| format!("{}: {e}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Sets every folder under `dir` to 0755 (umask-independent packages).
fn fix_dirs(dir: &Path) -> Result<()> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    for e in fs::read_dir(dir).map_err(|e| e.to_string())? {
        let p = e.map_err(|e| e.to_string())?.path();
        if p.is_dir() {
            fix_dirs(&p)?;
        }
    }
    Ok(())
}

fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut child = Command::new("gzip")
        .args(["-9n"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start gzip: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let data = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    writer
        .join()
        .map_err(|_| "gzip writer panicked".to_string())?
        .map_err(|e| format!("gzip: {e}"))?;
    if !out.status.success() {
        return Err(format!("gzip failed ({})", out.status));
    }
    Ok(out.stdout)
}

/// What every package carries besides the binary: man page, completions, README, licence.
struct Docs {
    man: Vec<u8>,
    completions: BTreeMap<&'static str, Vec<u8>>,
    readme: Vec<u8>,
    license: Vec<u8>,
}

fn docs(root: &Path, host_bin: &Path) -> Result<Docs> {
    let man = output(Command::new(host_bin).arg("man"))?;
    let mut completions = BTreeMap::new();
    for shell in ["bash", "zsh", "fish"] {
        completions.insert(
            shell,
            output(Command::new(host_bin).args(["completions", shell]))?,
        );
    }
    let read = |f: &str| fs::read(root.join(f)).map_err(|e| format!("{f}: {e}"));
    Ok(Docs {
        man,
        completions,
        readme: read("README.md")?,
        license: read("LICENSE")?,
    })
}

fn dist() -> Result<()> {
    if !cfg!(target_os = "linux") {
        return Err(
            "cargo xtask dist runs on Linux (it runs the built binary for the man page)".into(),
        );
    }
    let root = root();
    let version = package_version(&root)?;
    let host = host_target().ok_or_else(|| {
        format!(
            "this machine is {}: the release is made on x86_64 or aarch64 Linux, whose binary writes the man page",
            env::consts::ARCH
        )
    })?;
    require_tools(&[
        ("tar", "tar"),
        ("gzip", "gzip"),
        ("objdump", "binutils"),
        ("dpkg-deb", "dpkg"),
        ("sha256sum", "coreutils"),
    ])?;
    rust_targets()?;
    let zig_bin = zig_tools(&root)?;
    let mut path = vec![zig_bin];
    path.extend(env::split_paths(&env::var_os("PATH").unwrap_or_default()));
    let path: OsString = env::join_paths(path).map_err(|e| e.to_string())?;

    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let dist = target_dir.join("dist");
    let stage = target_dir.join("dist-stage");
    for d in [&dist, &stage] {
        if d.exists() {
            fs::remove_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }

    // Build both, then check the floor before anything is packed.
    let mut bins = Vec::new();
    for (t, _) in TARGETS {
        eprintln!(
            "xtask: building {t} against glibc {}.{}",
            GLIBC_FLOOR.0, GLIBC_FLOOR.1
        );
        run(
            Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
                .current_dir(&root)
                .env("PATH", &path)
                .args([
                    "zigbuild",
                    "--locked",
                    "--profile",
                    "portable",
                    "--bin",
                    "osmeter",
                    "--target",
                ])
                .arg(format!("{t}.{}.{}", GLIBC_FLOOR.0, GLIBC_FLOOR.1)),
        )?;
        let bin = target_dir.join(t).join("portable/osmeter");
        glibc_floor(&bin)?;
        bins.push(bin);
    }
    let host_bin = &bins[TARGETS
        .iter()
        .position(|(t, _)| *t == host)
        .expect("host is a target")];
    let docs = docs(&root, host_bin)?;
    let epoch = source_date_epoch(&root);

    let mut made = Vec::new();
    for ((t, arch), bin) in TARGETS.iter().zip(&bins) {
        let binary = fs::read(bin).map_err(|e| format!("{}: {e}", bin.display()))?;
        made.push(archive(&stage, &dist, &version, t, &binary, &docs, &epoch)?);
        made.push(deb(&stage, &dist, &version, arch, &binary, &docs)?);
    }
    let sums = output(Command::new("sha256sum").current_dir(&dist).args(&made))?;
    write_file(&dist.join("SHA256SUMS"), &sums, 0o644)?;
    fs::remove_dir_all(&stage).map_err(|e| e.to_string())?;
    println!("release {version} in {}:", dist.display());
    for f in made
        .iter()
        .chain(std::iter::once(&"SHA256SUMS".to_string()))
    {
        let len = fs::metadata(dist.join(f)).map(|m| m.len()).unwrap_or(0);
        println!("  {f} ({:.1} MiB)", len as f64 / 1048576.0);
    }
    Ok(())
}

/// The time stamp of the files in the archives: SOURCE_DATE_EPOCH, else the last commit's.
fn source_date_epoch(root: &Path) -> String {
    env::var("SOURCE_DATE_EPOCH")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            Command::new("git")
                .current_dir(root)
                .args(["log", "-1", "--format=%ct"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "0".into())
        })
}

/// osmeter-VERSION-TARGET.tar.gz: one folder with the binary, osmeter.1, complete/,
/// README.md and LICENSE.
fn archive(
    stage: &Path,
    dist: &Path,
    version: &str,
    target: &str,
    binary: &[u8],
    docs: &Docs,
    epoch: &str,
) -> Result<String> {
    let name = format!("osmeter-{version}-{target}");
    let dir = stage.join(&name);
    write_file(&dir.join("osmeter"), binary, 0o755)?;
    write_file(&dir.join("doc/osmeter.1"), &docs.man, 0o644)?;
    write_file(
        &dir.join("complete/osmeter.bash"),
        &docs.completions["bash"],
        0o644,
    )?;
    write_file(
        &dir.join("complete/_osmeter"),
        &docs.completions["zsh"],
        0o644,
    )?;
    write_file(
        &dir.join("complete/osmeter.fish"),
        &docs.completions["fish"],
        0o644,
    )?;
    write_file(&dir.join("README.md"), &docs.readme, 0o644)?;
    write_file(&dir.join("LICENSE"), &docs.license, 0o644)?;
    fix_dirs(&dir)?;
    let file = format!("{name}.tar.gz");
    run(Command::new("tar")
        .current_dir(stage)
        .args([
            "--sort=name",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            &format!("--mtime=@{epoch}"),
            "--use-compress-program=gzip -9n",
            "-cf",
        ])
        .arg(dist.join(&file))
        .arg(&name))?;
    Ok(file)
}

/// osmeter_VERSION-1_ARCH.deb: the same files where Debian keeps them.
fn deb(
    stage: &Path,
    dist: &Path,
    version: &str,
    arch: &str,
    binary: &[u8],
    docs: &Docs,
) -> Result<String> {
    let dir = stage.join(format!("deb-{arch}"));
    let mut files: Vec<(PathBuf, Vec<u8>, u32)> = vec![
        ("usr/bin/osmeter".into(), binary.to_vec(), 0o755),
        (
            "usr/share/man/man1/osmeter.1.gz".into(),
            gzip(&docs.man)?,
            0o644,
        ),
        (
            "usr/share/bash-completion/completions/osmeter".into(),
            docs.completions["bash"].clone(),
            0o644,
        ),
        (
            "usr/share/zsh/vendor-completions/_osmeter".into(),
            docs.completions["zsh"].clone(),
            0o644,
        ),
        (
            "usr/share/fish/vendor_completions.d/osmeter.fish".into(),
            docs.completions["fish"].clone(),
            0o644,
        ),
        (
            "usr/share/doc/osmeter/README.md.gz".into(),
            gzip(&docs.readme)?,
            0o644,
        ),
    ];
    let mut copyright = String::from(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: osmeter\n\nFiles: *\nLicense: MIT\n",
    );
    for l in String::from_utf8_lossy(&docs.license).lines() {
        let _ = writeln!(copyright, " {}", if l.trim().is_empty() { "." } else { l });
    }
    files.push((
        "usr/share/doc/osmeter/copyright".into(),
        copyright.into_bytes(),
        0o644,
    ));
    let size_kib: u64 = files
        .iter()
        .map(|(_, d, _)| (d.len() as u64).div_ceil(1024))
        .sum();
    for (p, d, m) in &files {
        write_file(&dir.join(p), d, *m)?;
    }
    let control = format!(
        "Package: osmeter\n\
         Version: {version}-1\n\
         Architecture: {arch}\n\
         Maintainer: osmeter developers <osmeter@invalid>\n\
         Installed-Size: {size_kib}\n\
         Depends: libc6 (>= 2.17)\n\
         Section: utils\n\
         Priority: optional\n\
         Description: measures what a machine and its OS really cost\n \
         Timer reads, system calls, task creation, context switches, memory latency\n \
         and bandwidth, page faults, network round trips and bandwidth, file reads and\n \
         the file cache, each with its spread, method and a prediction from the\n \
         machine's own facts; plus a block-size I/O toolkit.\n"
    );
    write_file(&dir.join("DEBIAN/control"), control.as_bytes(), 0o644)?;
    fix_dirs(&dir)?;
    let file = format!("osmeter_{version}-1_{arch}.deb");
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&dir)
        .arg(dist.join(&file))
        .stdout(Stdio::null()))?;
    Ok(file)
}
