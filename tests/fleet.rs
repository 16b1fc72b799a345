//! The Ansible playbook against a real fleet: hosts are network namespaces on one bridge,
//! each with its own sshd (config, host key, pid file and the user key all made by the
//! test in its temp folder; the machine's ssh setup is not touched). ansible-core is
//! installed with pip into a virtual environment cached in the cargo target folder
//! (CARGO_TARGET_TMPDIR/fleet-ansible-venv), so only the first run pays for the download.
//!
//! One case runs the playbook with the smoke profile and net pairs and checks the
//! collected folders, the peers, `history import` and the fleet page; one makes the run
//! step fail and checks that no serve, namespace process or scratch folder is left; one
//! runs the playbook as an unprivileged user (`nobody` when the test is root) over local
//! connections, two hosts on 127.0.0.2 and 127.0.0.3.
//! Everything is removed by a guard, also on failure. Needs root, iproute2, sshd,
//! ssh-keygen and python3 with venv; skips (or fails under OSMETER_REQUIRE_ALL_TESTS)
//! with the reason otherwise. Addresses: 10.214.N.0/24, N from the process id.

mod common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One fleet at a time: the cases share the venv and the address block.
static SERIAL: Mutex<()> = Mutex::new(());

fn run(cmd: &mut Command) -> Result<Output, String> {
    let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if o.status.success() {
        Ok(o)
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

fn which(tool: &str) -> Option<PathBuf> {
    let o = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
}

/// The missing prerequisites, as the skip reason.
fn missing() -> Option<String> {
    if !common::is_root() {
        return Some("needs root to create network namespaces, a bridge and sshds".into());
    }
    let gone: Vec<&str> = ["ip", "sshd", "ssh", "ssh-keygen", "python3"]
        .into_iter()
        .filter(|t| which(t).is_none())
        .collect();
    if !gone.is_empty() {
        return Some(format!(
            "missing {gone:?} (install iproute2 openssh-server openssh-client python3-venv)"
        ));
    }
    None
}

/// ansible-playbook from the cached venv, installing ansible-core on first use.
fn ansible_playbook() -> Result<PathBuf, String> {
    ansible_playbook_in(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("fleet-ansible-venv"))
}

/// ansible-playbook from a venv at `venv`, made there if it is not complete.
fn ansible_playbook_in(venv: &Path) -> Result<PathBuf, String> {
    let bin = venv.join("bin/ansible-playbook");
    // Written last: a venv without it is half-made (or from an older recipe) and redone.
    let done = venv.join("osmeter-test-ready-v2");
    if bin.exists() && done.exists() {
        return Ok(bin);
    }
    let _ = std::fs::remove_dir_all(venv);
    // The system's Python where there is one: a venv on a per-user Python (pyenv under
    // /root) would not run for the unprivileged case.
    let python = ["/usr/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .or_else(|| which("python3"))
        .ok_or("no python3")?;
    run(Command::new(python).arg("-m").arg("venv").arg(venv))
        .map_err(|e| format!("python3 -m venv (install python3-venv): {e}"))?;
    run(Command::new(venv.join("bin/pip")).args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "ansible-core",
    ]))
    .map_err(|e| {
        let _ = std::fs::remove_dir_all(venv);
        format!("pip install ansible-core: {e}")
    })?;
    std::fs::write(&done, "").map_err(|e| e.to_string())?;
    Ok(bin)
}

struct Host {
    name: String,
    ns: String,
    ip: String,
    sshd: Option<Child>,
}

/// Namespaces on a bridge, their sshds and the test folder; Drop undoes all of it.
struct Fleet {
    dir: tempfile::TempDir,
    bridge: String,
    hosts: Vec<Host>,
    made_run_sshd: bool,
}

impl Fleet {
    fn build(case: u32, n: usize) -> Result<Fleet, String> {
        let pid = std::process::id();
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).map_err(|e| e.to_string())?;
        let net = format!("10.214.{}", pid % 250 + 1);
        let mut f = Fleet {
            dir,
            bridge: format!("osmfb{pid}{case}"),
            hosts: Vec::new(),
            made_run_sshd: false,
        };
        run(Command::new("ip").args(["link", "add", &f.bridge, "type", "bridge"]))?;
        run(Command::new("ip").args(["addr", "add", &format!("{net}.1/24"), "dev", &f.bridge]))?;
        run(Command::new("ip").args(["link", "set", &f.bridge, "up"]))?;
        let d = f.dir.path().to_path_buf();
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(d.join("userkey")))?;
        std::fs::copy(d.join("userkey.pub"), d.join("authorized_keys"))
            .map_err(|e| e.to_string())?;
        if !Path::new("/run/sshd").exists() {
            std::fs::create_dir_all("/run/sshd").map_err(|e| e.to_string())?;
            f.made_run_sshd = true;
        }
        let sshd = which("sshd").unwrap_or_else(|| "/usr/sbin/sshd".into());
        for i in 1..=n {
            let name = format!("h{i}");
            let ns = format!("osmf{pid}c{case}{name}");
            let veth = format!("osmf{pid}{case}{i}");
            let ip = format!("{net}.{}", 10 + i);
            run(Command::new("ip").args(["netns", "add", &ns]))?;
            f.hosts.push(Host {
                name: name.clone(),
                ns: ns.clone(),
                ip: ip.clone(),
                sshd: None,
            });
            run(Command::new("ip").args([
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]))?;
            run(Command::new("ip").args(["link", "set", &veth, "master", &f.bridge]))?;
            run(Command::new("ip").args(["link", "set", &veth, "up"]))?;
            let in_ns = |args: &[&str]| {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns]).args(args);
                c
            };
            run(&mut in_ns(&[
                "ip",
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                "eth0",
            ]))?;
            run(&mut in_ns(&["ip", "link", "set", "eth0", "up"]))?;
            run(&mut in_ns(&["ip", "link", "set", "lo", "up"]))?;
            let hd = d.join(&name);
            std::fs::create_dir(&hd).map_err(|e| e.to_string())?;
            run(Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(hd.join("hostkey")))?;
            let cfg = format!(
                "ListenAddress {ip}\nPort 22\nHostKey {}\nAuthorizedKeysFile {}\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n\
                 PidFile {}\nSubsystem sftp internal-sftp\n",
                hd.join("hostkey").display(),
                d.join("authorized_keys").display(),
                hd.join("sshd.pid").display()
            );
            std::fs::write(hd.join("sshd_config"), cfg).map_err(|e| e.to_string())?;
            let child = Command::new("ip")
                .args(["netns", "exec", &ns])
                .arg(&sshd)
                .args(["-D", "-e", "-f"])
                .arg(hd.join("sshd_config"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("sshd: {e}"))?;
            f.hosts.last_mut().unwrap().sshd = Some(child);
        }
        let t = Instant::now();
        for h in &f.hosts {
            let addr = format!("{}:22", h.ip).parse().unwrap();
            while TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_err() {
                if t.elapsed() > Duration::from_secs(20) {
                    return Err(format!("sshd on {} did not listen within 20 s", h.ip));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        std::fs::create_dir(f.remote_tmp()).map_err(|e| e.to_string())?;
        let mut inv = String::from("[fleet]\n");
        for h in &f.hosts {
            inv.push_str(&format!("{} ansible_host={}\n", h.name, h.ip));
        }
        inv.push_str(&format!(
            "\n[fleet:vars]\nansible_user=root\nansible_ssh_private_key_file={}\nansible_python_interpreter=/usr/bin/python3\n",
            d.join("userkey").display()
        ));
        std::fs::write(f.inventory(), inv).map_err(|e| e.to_string())?;
        // An empty configuration: no ansible.cfg of this machine's user applies.
        std::fs::write(d.join("ansible.cfg"), "[defaults]\n").map_err(|e| e.to_string())?;
        Ok(f)
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn inventory(&self) -> PathBuf {
        self.path().join("inventory.ini")
    }
    /// Where the playbook makes the hosts' scratch folders (osmeter_remote_tmp).
    fn remote_tmp(&self) -> PathBuf {
        self.path().join("remote-tmp")
    }

    /// Runs the playbook with these extra variables; returns its output.
    fn playbook(&self, bin: &Path, out: &Path, extra: &[&str]) -> Output {
        let d = self.path();
        let playbook = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/ansible/osmeter.yml");
        let mut c = Command::new(bin);
        c.current_dir(d)
            .arg("-i")
            .arg(self.inventory())
            .arg(playbook)
            .arg("-e")
            .arg(format!("osmeter_binary={}", env!("CARGO_BIN_EXE_osmeter")))
            .arg("-e")
            .arg(format!("osmeter_results_dir={}", out.display()))
            .arg("-e")
            .arg(format!(
                "osmeter_remote_tmp={}",
                self.remote_tmp().display()
            ));
        for e in extra {
            c.arg("-e").arg(e);
        }
        // Ansible's own state in the test folder; no ssh master left running afterwards.
        c.env("ANSIBLE_HOME", d.join("ansible-home"))
            .env("ANSIBLE_LOCAL_TEMP", d.join("ansible-local"))
            .env("ANSIBLE_REMOTE_TEMP", d.join("ansible-remote"))
            .env("ANSIBLE_HOST_KEY_CHECKING", "False")
            .env(
                "ANSIBLE_SSH_ARGS",
                "-o ControlMaster=no -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no",
            )
            .env("ANSIBLE_NOCOLOR", "1")
            .env("ANSIBLE_RETRY_FILES_ENABLED", "False")
            .env("ANSIBLE_CONFIG", d.join("ansible.cfg"));
        c.output().expect("ansible-playbook")
    }

    /// What the playbook must have removed: processes in the namespaces besides sshd,
    /// processes running a binary from the scratch area, and the scratch folders.
    fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        let tmp = self.remote_tmp();
        for h in &self.hosts {
            let sshd = h.sshd.as_ref().map(|c| c.id());
            if let Ok(o) = Command::new("ip").args(["netns", "pids", &h.ns]).output() {
                for p in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let Ok(p) = p.parse::<u32>() else { continue };
                    let exe = std::fs::read_link(format!("/proc/{p}/exe")).unwrap_or_default();
                    let is_sshd = Some(p) == sshd || exe.ends_with("sshd");
                    if !is_sshd {
                        left.push(format!("process {p} ({}) in {}", exe.display(), h.ns));
                    }
                }
            }
        }
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            if let Ok(exe) = std::fs::read_link(e.path().join("exe")) {
                if exe.starts_with(&tmp) {
                    left.push(format!(
                        "process {:?} runs {}",
                        e.file_name(),
                        exe.display()
                    ));
                }
            }
        }
        for e in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            left.push(format!("scratch left: {}", e.path().display()));
        }
        left
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for h in &mut self.hosts {
            // Anything still in the namespace (a serve the playbook missed) goes first.
            if let Ok(o) = Command::new("ip").args(["netns", "pids", &h.ns]).output() {
                for p in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", p]).status();
                }
            }
            if let Some(mut c) = h.sshd.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            // Deleting the namespace removes its veth end, and with it the pair.
            let _ = Command::new("ip").args(["netns", "del", &h.ns]).status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(Stdio::null())
            .status();
        if self.made_run_sshd {
            let _ = std::fs::remove_dir("/run/sshd");
        }
        // The TempDir removes keys, configs, inventory, scratch area and results.
    }
}

/// The fleet and ansible-playbook, or None after a skip.
fn setup(test: &str, case: u32, hosts: usize) -> Option<(Fleet, PathBuf)> {
    if let Some(why) = missing() {
        common::skip(test, &why);
        return None;
    }
    let bin = match ansible_playbook() {
        Ok(b) => b,
        Err(e) => {
            common::skip(test, &format!("cannot install ansible-core: {e}"));
            return None;
        }
    };
    match Fleet::build(case, hosts) {
        Ok(f) => Some((f, bin)),
        Err(e) => {
            common::skip(test, &format!("cannot build the namespace fleet here: {e}"));
            None
        }
    }
}

/// Each failed experiment, with its reason, in the results.json files fetched under `dir`:
/// what a failed playbook's "osmeter run exited with 1" does not say.
fn failed_experiments(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.file_name().is_some_and(|n| n == "results.json") {
                let v: serde_json::Value = std::fs::read_to_string(&p)
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or_default();
                for x in v["experiments"].as_array().into_iter().flatten() {
                    if x["status"] == "failed" {
                        found.push(format!("{}: {}: {}", p.display(), x["id"], x["reason"]));
                    }
                }
            }
        }
    }
    found
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn osmeter(args: &[&str], db: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_osmeter"))
        .args(args)
        .env("OSMETER_HISTORY_DB", db)
        .output()
        .unwrap()
}

#[test]
fn playbook_measures_a_ring_of_namespace_hosts() {
    const TEST: &str = "playbook_measures_a_ring_of_namespace_hosts";
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some((fleet, bin)) = setup(TEST, 1, 3) else {
        return;
    };
    let out = fleet.path().join("out");
    let o = fleet.playbook(
        &bin,
        &out,
        &[
            "osmeter_profile=smoke",
            "osmeter_only=cpu.syscall,net.*",
            "osmeter_net_pairs=true",
        ],
    );
    assert!(
        o.status.success(),
        "playbook failed:\n{}\nexperiments that failed: {:?}",
        text(&o),
        failed_experiments(&out)
    );
    let left = fleet.leftovers();
    assert!(left.is_empty(), "left behind: {left:?}");

    let n = fleet.hosts.len();
    for (i, h) in fleet.hosts.iter().enumerate() {
        let folder = out.join(&h.name);
        for f in ["results.json", "report.md", "report.html"] {
            assert!(
                folder.join(f).is_file(),
                "{} missing",
                folder.join(f).display()
            );
        }
        let entries: Vec<PathBuf> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(entries.iter().all(|p| p.is_file()), "not flat: {entries:?}");
        assert!(
            entries
                .iter()
                .any(|p| p.extension().is_some_and(|x| x == "svg")),
            "no plots: {entries:?}"
        );
        let raw = std::fs::read_to_string(folder.join("results.json")).unwrap();
        assert!(!raw.contains("peer_token"), "the token leaked into results");
        let r: serde_json::Value = serde_json::from_str(&raw).unwrap();
        let next = &fleet.hosts[(i + 1) % n];
        assert_eq!(r["config"]["options"]["host_name"], h.name.as_str());
        assert_eq!(
            r["config"]["peer"]["name"],
            next.name.as_str(),
            "{}",
            r["config"]
        );
        assert_eq!(
            r["config"]["peer"]["address"],
            format!("{}:9197", next.ip).as_str()
        );
        let rtt = r["experiments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == "net.rtt")
            .expect("net.rtt ran");
        assert_eq!(rtt["status"], "ok", "{}: {rtt}", h.name);
        let notes = rtt["notes"].to_string();
        assert!(
            notes.contains(&format!("remote peer {}:9197", next.ip)),
            "{}: net.rtt not measured against {}: {notes}",
            h.name,
            next.ip
        );
        let tcp = rtt["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "remote_tcp")
            .expect("the round trip to the next host");
        let med = tcp["summary"]["median"].as_f64().unwrap();
        eprintln!(
            "{} -> {}: net.rtt remote_tcp median {med:.0} ns",
            h.name, next.name
        );
        // A veth and bridge round trip: more than a microsecond, far less than a second.
        assert!((1e3..1e9).contains(&med), "{}: tcp rtt {med} ns", h.name);
    }

    // The import: twice, kept once; one metrics row per host.
    let db = fleet.path().join("history.sqlite");
    let first = osmeter(&["history", "import", out.to_str().unwrap()], &db);
    assert!(first.status.success(), "{}", text(&first));
    assert!(text(&first).contains(&format!("imported {n} run(s), 0 already present")));
    let again = osmeter(&["history", "import", out.to_str().unwrap()], &db);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        text(&again).contains(&format!("imported 0 run(s), {n} already present")),
        "{}",
        text(&again)
    );
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut rows: Vec<(String, f64)> = conn
        .prepare("select host, median from metrics where experiment='cpu.syscall' and metric='getppid' order by host")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    rows.iter().for_each(|(_, m)| assert!(*m > 0.0));
    let hosts: Vec<String> = rows.drain(..).map(|(h, _)| h).collect();
    let names: Vec<String> = fleet.hosts.iter().map(|h| h.name.clone()).collect();
    assert_eq!(hosts, names);
    let runs: i64 = conn
        .query_row("select count(*) from runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, n as i64);

    // compare of the folders, with the fleet page.
    let page = fleet.path().join("fleet.html");
    let mut args = vec!["compare".to_string()];
    args.extend(names.iter().map(|h| out.join(h).display().to_string()));
    args.extend(["--json".into(), "--html".into(), page.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let c = osmeter(&args, &db);
    assert!(c.status.success(), "{}", text(&c));
    let v: serde_json::Value = serde_json::from_slice(&c.stdout).expect("compare --json");
    assert_eq!(v["runs"].as_array().unwrap().len(), n);
    assert_eq!(v["runs"][1]["host"], "h2");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("Network between hosts") && html.contains("net.rtt / remote_tcp"));
    for (i, h) in names.iter().enumerate() {
        assert!(html.contains(&format!("<th>{}: {h}", (b'A' + i as u8) as char)));
        // The matrix row of h holds a figure in its peer's column only.
        let row = html.split(&format!("<tr><th>{h}</th>")).nth(1).unwrap();
        let row = &row[..row.find("</tr>").unwrap()];
        assert_eq!(row.matches("class=\"num\"").count(), 1, "{h}: {row}");
    }
    assert!(!html.contains("<script"));
    // The page is never overwritten.
    let c2 = osmeter(&args, &db);
    assert_eq!(c2.status.code(), Some(2), "{}", text(&c2));
    drop(fleet);
}

#[test]
fn a_failing_step_leaves_nothing_behind() {
    const TEST: &str = "a_failing_step_leaves_nothing_behind";
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some((fleet, bin)) = setup(TEST, 2, 2) else {
        return;
    };
    // The leftover check itself must see what it looks for: a folder in the scratch area
    // and a process in a host's namespace.
    std::fs::create_dir(fleet.remote_tmp().join("osmeter-h1-probe")).unwrap();
    let mut probe = Command::new("ip")
        .args(["netns", "exec", &fleet.hosts[0].ns, "sleep", "60"])
        .spawn()
        .unwrap();
    // The probe process takes a moment to exist in the namespace (longer on a loaded
    // host): look until both probes are seen, for up to 10 s.
    let found = |seen: &[String]| {
        seen.iter().any(|l| l.contains("scratch left"))
            && seen.iter().any(|l| l.contains("process"))
    };
    let t = Instant::now();
    let mut seen = fleet.leftovers();
    while !found(&seen) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        seen = fleet.leftovers();
    }
    let _ = probe.kill();
    let _ = probe.wait();
    std::fs::remove_dir(fleet.remote_tmp().join("osmeter-h1-probe")).unwrap();
    assert!(
        found(&seen),
        "the leftover check missed the probes: {seen:?}"
    );
    assert!(fleet.leftovers().is_empty());

    let out = fleet.path().join("out");
    // An unknown experiment: osmeter run exits 2 on every host after the serves started.
    let o = fleet.playbook(
        &bin,
        &out,
        &[
            "osmeter_profile=smoke",
            "osmeter_only=no.such-experiment",
            "osmeter_net_pairs=true",
        ],
    );
    assert!(
        !o.status.success(),
        "the playbook should fail:\n{}",
        text(&o)
    );
    let log = text(&o);
    // The serves were up (the failure came after them), and were stopped.
    let waited = log
        .split("TASK [Wait for the peer to listen]")
        .nth(1)
        .and_then(|t| t.split("TASK [").next())
        .unwrap_or_default();
    assert!(
        waited.contains("ok: [h1]") && waited.contains("ok: [h2]"),
        "{log}"
    );
    assert!(log.contains("Stop the peer this play started"), "{log}");
    assert!(log.contains("no.such-experiment"), "{log}");
    let left = fleet.leftovers();
    assert!(left.is_empty(), "left behind: {left:?}\n{log}");
    assert!(!out.join("h1").join("results.json").exists());

    // Results already collected are never overwritten: a second play refuses at once.
    std::fs::create_dir_all(out.join("h1")).unwrap();
    std::fs::write(out.join("h1/results.json"), "keep").unwrap();
    let o = fleet.playbook(
        &bin,
        &out,
        &["osmeter_profile=smoke", "osmeter_only=cpu.timer"],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(out.join("h1/results.json")).unwrap(),
        "keep"
    );
    let left = fleet.leftovers();
    assert!(left.is_empty(), "left behind: {left:?}");
    drop(fleet);
}

/// A release folder as `cargo xtask dist` lays it out, holding `binary` as this machine's
/// architecture's archive.
fn release_dir(dir: &Path, binary: &Path) -> PathBuf {
    let name = format!("osmeter-0.0.0-{}-unknown-linux-gnu", std::env::consts::ARCH);
    let stage = dir.join("stage").join(&name);
    std::fs::create_dir_all(&stage).unwrap();
    std::fs::copy(binary, stage.join("osmeter")).unwrap();
    let rel = dir.join("release");
    std::fs::create_dir_all(&rel).unwrap();
    let st = Command::new("tar")
        .arg("-C")
        .arg(dir.join("stage"))
        .arg("-czf")
        .arg(rel.join(format!("{name}.tar.gz")))
        .arg(&name)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::remove_dir_all(dir.join("stage")).unwrap();
    rel
}

#[test]
fn a_host_that_cannot_start_osmeter_is_reported_and_the_others_finish() {
    const TEST: &str = "a_host_that_cannot_start_osmeter_is_reported_and_the_others_finish";
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some((fleet, bin)) = setup(TEST, 3, 2) else {
        return;
    };
    let d = fleet.path();
    // h1 gets the real release; h2 one whose binary fails to load as a binary built
    // against a newer glibc does on an old host.
    let good = release_dir(&d.join("good"), Path::new(env!("CARGO_BIN_EXE_osmeter")));
    let stub = d.join("old-glibc-osmeter");
    std::fs::write(
        &stub,
        "#!/bin/sh\necho \"$0: /lib/x86_64-linux-gnu/libc.so.6: version \\`GLIBC_2.99' not found (required by $0)\" >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let bad = release_dir(&d.join("bad"), &stub);
    let inv = std::fs::read_to_string(fleet.inventory()).unwrap();
    let h2 = &fleet.hosts[1];
    let line = format!("{} ansible_host={}", h2.name, h2.ip);
    assert!(inv.contains(&line), "{inv}");
    // The group's release, and h2's own (the inventory's host variable wins over its group's).
    let inv = inv.replace(
        &line,
        &format!("{line} osmeter_release_dir={}", bad.display()),
    );
    let inv = inv.replace(
        "[fleet:vars]\n",
        &format!("[fleet:vars]\nosmeter_release_dir={}\n", good.display()),
    );
    std::fs::write(fleet.inventory(), inv).unwrap();

    let out = d.join("out");
    let o = fleet.playbook(
        &bin,
        &out,
        &["osmeter_profile=smoke", "osmeter_only=cpu.timer"],
    );
    let log = text(&o);
    assert!(
        !o.status.success(),
        "a host failed, so must the play:\n{log}"
    );
    assert!(
        log.contains("osmeter cannot start on h2") && log.contains("GLIBC_2.99"),
        "the failing host and its reason:\n{log}"
    );
    assert!(
        out.join("h1/results.json").is_file(),
        "h1 should have finished:\n{log}"
    );
    assert!(!out.join("h2/results.json").exists(), "{log}");
    let left = fleet.leftovers();
    assert!(left.is_empty(), "left behind: {left:?}\n{log}");
    drop(fleet);
}

#[test]
fn the_playbook_runs_as_an_unprivileged_user() {
    const TEST: &str = "the_playbook_runs_as_an_unprivileged_user";
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let root = common::is_root();
    if root && which("runuser").is_none() {
        common::skip(TEST, "needs runuser (util-linux) to drop to nobody");
        return;
    }
    // Everything nobody runs or reads must be reachable by nobody: a clone inside a
    // mode-0700 folder (root's home, a `mktemp -d`) puts the target folder out of its
    // reach, and then the venv, the playbook and the run live in a temp folder it can
    // enter, removed by its guard.
    let base = if root {
        match common::tempdir_others_can_enter() {
            Ok(t) => t,
            Err(e) => return common::skip(TEST, &e),
        }
    } else {
        tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
    };
    let shared_venv = !root || common::searchable_by_others(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let bin = match if shared_venv {
        ansible_playbook()
    } else {
        ansible_playbook_in(&base.path().join("venv"))
    } {
        Ok(b) => b,
        Err(e) => {
            common::skip(TEST, &format!("cannot install ansible-core: {e}"));
            return;
        }
    };
    let d = &base.path().join("run");
    std::fs::create_dir(d).unwrap();
    let osm = d.join("osmeter");
    std::fs::copy(env!("CARGO_BIN_EXE_osmeter"), &osm).unwrap();
    let port = 20000 + std::process::id() % 20000;
    std::fs::write(
        d.join("inventory.ini"),
        "[fleet]\nu1 ansible_host=127.0.0.2\nu2 ansible_host=127.0.0.3\n\n[fleet:vars]\nansible_connection=local\n",
    )
    .unwrap();
    std::fs::write(d.join("ansible.cfg"), "[defaults]\n").unwrap();
    std::fs::create_dir(d.join("remote-tmp")).unwrap();
    // A copy: the checkout may be out of nobody's reach too.
    let playbook = d.join("osmeter.yml");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/ansible/osmeter.yml"),
        &playbook,
    )
    .unwrap();
    if root {
        run(Command::new("chown").args(["-R", "nobody"]).arg(d)).unwrap();
    }
    let mut c = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"]).arg(&bin);
        c
    } else {
        Command::new(&bin)
    };
    let out = d.join("out");
    c.current_dir(d)
        .arg("-i")
        .arg(d.join("inventory.ini"))
        .arg(&playbook)
        .args([
            "-e",
            "osmeter_profile=smoke",
            "-e",
            "osmeter_only=cpu.syscall,net.rtt",
        ])
        .args(["-e", "osmeter_net_pairs=true", "-e"])
        .arg(format!("osmeter_serve_port={port}"))
        .arg("-e")
        .arg(format!("osmeter_binary={}", osm.display()))
        .arg("-e")
        .arg(format!("osmeter_results_dir={}", out.display()))
        .arg("-e")
        .arg(format!(
            "osmeter_remote_tmp={}",
            d.join("remote-tmp").display()
        ))
        // nobody's home (/nonexistent) is not writable: Ansible's state goes here.
        .env("HOME", d)
        .env("ANSIBLE_HOME", d.join("ansible-home"))
        .env("ANSIBLE_LOCAL_TEMP", d.join("ansible-local"))
        .env("ANSIBLE_REMOTE_TEMP", d.join("ansible-remote"))
        .env("ANSIBLE_CONFIG", d.join("ansible.cfg"))
        .env("ANSIBLE_PYTHON_INTERPRETER", "auto_silent")
        .env("ANSIBLE_NOCOLOR", "1");
    let o = c.output().unwrap();
    assert!(o.status.success(), "playbook failed:\n{}", text(&o));
    for (h, peer, ip) in [("u1", "u2", "127.0.0.3"), ("u2", "u1", "127.0.0.2")] {
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join(h).join("results.json")).unwrap())
                .unwrap();
        assert_eq!(r["config"]["peer"]["name"], peer);
        assert_eq!(
            r["config"]["peer"]["address"],
            format!("{ip}:{port}").as_str()
        );
        let rtt = r["experiments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == "net.rtt")
            .unwrap();
        assert_eq!(rtt["status"], "ok", "{h}: {rtt}");
    }
    assert_eq!(std::fs::read_dir(d.join("remote-tmp")).unwrap().count(), 0);
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(exe) = std::fs::read_link(e.path().join("exe")) {
            assert!(
                !exe.starts_with(d.join("remote-tmp")),
                "left running: {exe:?}"
            );
        }
    }
}
