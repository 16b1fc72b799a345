//! fs.remote-read against a real network file system: sshfs mounting a folder served by
//! an sshd inside a network namespace this test creates, over a veth pair with private
//! test addresses on that pair only. Everything is removed by a guard, also on failure.
//! Skipped with a reason where it cannot be built (not root, tools missing).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

/// The namespace, veth pair, sshd, sshfs mount and temp folder (keys included); Drop
/// undoes all of it in reverse order.
struct Served {
    dir: tempfile::TempDir,
    ns: String,
    host_if: String,
    sshd: Option<Child>,
    sshfs: Option<Child>,
    mounted: bool,
    made_run_sshd: bool,
}

impl Served {
    fn export(&self) -> PathBuf {
        self.dir.path().join("export")
    }
    fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    fn build() -> Result<Served, String> {
        let pid = std::process::id();
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).map_err(|e| e.to_string())?;
        let mut s = Served {
            dir,
            ns: format!("osmns{pid}"),
            host_if: format!("osmh{pid}"),
            sshd: None,
            sshfs: None,
            mounted: false,
            made_run_sshd: false,
        };
        // Private addresses from 10.213.0.0/16, a /30 per test process, on the pair only.
        let net = (pid % 16000) * 4;
        let (a, b) = (net / 256, net % 256);
        let host_ip = format!("10.213.{a}.{}", b + 1);
        let ns_ip = format!("10.213.{a}.{}", b + 2);
        let ns_if = format!("osmn{pid}");
        run(Command::new("ip").args(["netns", "add", &s.ns]))?;
        run(Command::new("ip").args([
            "link", "add", &s.host_if, "type", "veth", "peer", "name", &ns_if,
        ]))?;
        run(Command::new("ip").args(["link", "set", &ns_if, "netns", &s.ns]))?;
        run(Command::new("ip").args(["addr", "add", &format!("{host_ip}/30"), "dev", &s.host_if]))?;
        run(Command::new("ip").args(["link", "set", &s.host_if, "up"]))?;
        let in_ns = |args: &[&str]| {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &s.ns]).args(args);
            c
        };
        run(&mut in_ns(&[
            "ip",
            "addr",
            "add",
            &format!("{ns_ip}/30"),
            "dev",
            &ns_if,
        ]))?;
        run(&mut in_ns(&["ip", "link", "set", &ns_if, "up"]))?;
        run(&mut in_ns(&["ip", "link", "set", "lo", "up"]))?;

        let d = s.dir.path().to_path_buf();
        std::fs::create_dir(s.export()).map_err(|e| e.to_string())?;
        std::fs::create_dir(s.mnt()).map_err(|e| e.to_string())?;
        for k in ["hostkey", "userkey"] {
            run(Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(k)))?;
        }
        std::fs::copy(d.join("userkey.pub"), d.join("authorized_keys"))
            .map_err(|e| e.to_string())?;
        let cfg = format!(
            "ListenAddress {ns_ip}\nPort 2222\nHostKey {}\nAuthorizedKeysFile {}\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n\
             PidFile {}\nSubsystem sftp internal-sftp\n",
            d.join("hostkey").display(),
            d.join("authorized_keys").display(),
            d.join("sshd.pid").display()
        );
        std::fs::write(d.join("sshd_config"), cfg).map_err(|e| e.to_string())?;
        // sshd insists on its privilege-separation folder.
        if !Path::new("/run/sshd").exists() {
            std::fs::create_dir_all("/run/sshd").map_err(|e| e.to_string())?;
            s.made_run_sshd = true;
        }
        let sshd = Command::new("ip")
            .args(["netns", "exec", &s.ns])
            .arg(which("sshd").unwrap_or_else(|| "/usr/sbin/sshd".into()))
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("sshd: {e}"))?;
        s.sshd = Some(sshd);

        // Mount in the foreground so the guard owns the process; retry while sshd starts.
        let t = Instant::now();
        loop {
            let mut child = Command::new("sshfs")
                .arg(format!("root@{ns_ip}:{}", s.export().display()))
                .arg(s.mnt())
                .args(["-f", "-o"])
                .arg(format!(
                    "IdentityFile={},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,port=2222,BatchMode=yes,LogLevel=ERROR",
                    d.join("userkey").display()
                ))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("sshfs: {e}"))?;
            let t2 = Instant::now();
            while t2.elapsed() < Duration::from_secs(5) {
                if is_fuse(&s.mnt()) {
                    s.mounted = true;
                    s.sshfs = Some(child);
                    return Ok(s);
                }
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            if t.elapsed() > Duration::from_secs(20) {
                return Err("sshfs did not mount within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn which(tool: &str) -> Option<String> {
    let o = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn is_fuse(p: &Path) -> bool {
    osmeter::scratch::fs_info(p)
        .map(|i| i.fs_type == "fuse")
        .unwrap_or(false)
}

impl Drop for Served {
    fn drop(&mut self) {
        if self.mounted {
            let unmounted = Command::new("fusermount")
                .args(["-u", "-z"])
                .arg(self.mnt())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !unmounted {
                let _ = Command::new("umount").arg("-l").arg(self.mnt()).status();
            }
        }
        for c in [self.sshfs.take(), self.sshd.take()].into_iter().flatten() {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
        // Deleting the namespace removes its end of the pair, and with it the pair.
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(Stdio::null())
            .status();
        if self.made_run_sshd {
            let _ = std::fs::remove_dir("/run/sshd");
        }
        // The TempDir field removes keys, config, export and mount point.
    }
}

#[test]
fn remote_read_over_sshfs_from_a_network_namespace() {
    const TEST: &str = "remote_read_over_sshfs_from_a_network_namespace";
    if !common::is_root() {
        common::skip(
            TEST,
            "needs root to create a network namespace and veth pair",
        );
        return;
    }
    let missing: Vec<&str> = ["ip", "sshd", "sshfs", "ssh-keygen", "fusermount"]
        .into_iter()
        .filter(|t| {
            let sbin = Path::new("/usr/sbin").join(t).exists();
            !(have(t) || sbin)
        })
        .collect();
    if !missing.is_empty() || !Path::new("/dev/fuse").exists() {
        common::skip(
            TEST,
            &format!(
                "missing {missing:?} or /dev/fuse (install openssh-server sshfs iproute2 fuse3)"
            ),
        );
        return;
    }
    let served = match Served::build() {
        Ok(s) => s,
        Err(e) => {
            common::skip(
                TEST,
                &format!("cannot build the served file system here: {e}"),
            );
            return;
        }
    };
    let out = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_osmeter"))
        .args([
            "run",
            "--only",
            "fs.remote-read",
            "--profile",
            // quick, not smoke: enough trials that a burst of disk traffic from other
            // work on a shared machine cannot flip the relation.
            "quick",
            "--json",
            "--no-history",
            "--remote-dir",
        ])
        .arg(served.mnt())
        .arg("--scratch-dir")
        .arg(scratch.path())
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let e = &v["experiments"][0];
    assert_eq!(e["id"], "fs.remote-read");
    // sshfs has no block device to count the remote reads: the uncached figures are
    // measured but unverified, never ok.
    assert_eq!(e["status"], "unverified", "{e}");
    assert!(
        e["reason"]
            .as_str()
            .is_some_and(|r| r.contains("sectors-read counter")),
        "{e}"
    );
    let med = |m: &str| {
        e["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == m)
            .map(|x| x["summary"]["median"].as_f64().unwrap())
            .unwrap_or_else(|| panic!("no {m}"))
    };
    let ratio = med("ratio_uncached_random");
    eprintln!(
        "remote/local: uncached random {ratio:.2}, uncached seq {:.2}, cached random {:.2}",
        med("ratio_uncached_seq"),
        med("ratio_cached_random")
    );
    let all: Vec<String> = e["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{} {:.0}",
                m["name"],
                m["summary"]["median"].as_f64().unwrap_or(f64::NAN)
            )
        })
        .collect();
    assert!(
        ratio > 1.0,
        "remote random reads slower than local: {ratio}; {all:?}"
    );
    // Nothing left on either side.
    assert_eq!(std::fs::read_dir(served.export()).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
    drop(served);
}
