//! `osmeter serve`: the peer network experiments talk to (crate::peer::server), until
//! killed. Bad options are usage errors (exit 2); a socket it cannot listen on exits 1.

use crate::error::{Error, Result};
use crate::peer::{protocol, server};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(super) struct Args {
    /// Address to listen on: IP or IP:PORT. Loopback unless told otherwise.
    #[arg(long, default_value = "127.0.0.1")]
    pub(super) bind: String,
    /// Port to listen on (0: any free port; printed on stdout).
    #[arg(long, default_value_t = protocol::DEFAULT_PORT)]
    pub(super) port: u16,
    /// Shared token clients must present (also read from OSMETER_SERVE_TOKEN). Required
    /// off loopback unless --no-token.
    #[arg(long)]
    pub(super) token: Option<String>,
    /// Serve off loopback without a token: anyone who reaches the port may use it.
    #[arg(long, conflicts_with = "token")]
    pub(super) no_token: bool,
    /// Concurrent sessions served; more are refused as busy.
    #[arg(long, default_value_t = 16)]
    pub(super) max_sessions: usize,
    /// Longest a single test may run, in seconds.
    #[arg(long, default_value_t = 60)]
    max_duration: u64,
    /// Drop a client silent for this many seconds.
    #[arg(long, default_value_t = 30)]
    idle_timeout: u64,
    /// Do not log rejected or broken clients.
    #[arg(long)]
    quiet: bool,
    /// Exit when stdin closes (osmeter run uses this so its peer dies with it).
    #[arg(long, hide = true)]
    parent_watch: bool,
    /// CPUs to run on (osmeter run passes its own allowed set; it pins itself).
    #[arg(long, hide = true)]
    affinity: Option<String>,
}

pub(super) fn run(a: Args) -> ExitCode {
    crate::error::exit(serve(a))
}

fn parse_bind(bind: &str, port: u16) -> std::result::Result<SocketAddr, String> {
    if let Ok(a) = bind.parse::<SocketAddr>() {
        return Ok(a);
    }
    let ip = bind.trim_start_matches('[').trim_end_matches(']');
    ip.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, port))
        .map_err(|_| format!("--bind '{bind}': expected an IP address or IP:PORT"))
}

/// Checks the options, listens, prints the address, then serves until killed.
fn serve(a: Args) -> Result<()> {
    let bind = parse_bind(&a.bind, a.port).map_err(Error::usage)?;
    if !(1..=1024).contains(&a.max_sessions) {
        return Err(Error::usage("--max-sessions must be 1-1024"));
    }
    if !(1..=3600).contains(&a.max_duration) || !(1..=3600).contains(&a.idle_timeout) {
        return Err(Error::usage(
            "--max-duration and --idle-timeout must be 1-3600 seconds",
        ));
    }
    let token = a
        .token
        .or_else(|| std::env::var("OSMETER_SERVE_TOKEN").ok())
        .filter(|t| !t.is_empty());
    if token
        .as_ref()
        .is_some_and(|t| t.len() > protocol::MAX_TOKEN)
    {
        return Err(Error::usage(format!(
            "--token longer than {} bytes",
            protocol::MAX_TOKEN
        )));
    }
    if token.is_none() && !bind.ip().is_loopback() {
        if !a.no_token {
            return Err(Error::usage(format!(
                "--bind {}: off loopback a token is required (--token or OSMETER_SERVE_TOKEN), or --no-token to serve anyone who reaches the port",
                bind.ip()
            )));
        }
        eprintln!(
            "osmeter serve: warning: no token on {}: anyone who reaches the port can make this host send at full speed",
            bind.ip()
        );
    }
    if let Some(list) = &a.affinity {
        let cpus: Vec<usize> = list.split(',').filter_map(|c| c.parse().ok()).collect();
        let _ = crate::platform::set_affinity(&cpus);
    }
    if a.parent_watch {
        std::thread::spawn(|| {
            let mut sink = [0u8; 64];
            use std::io::Read;
            let mut stdin = std::io::stdin();
            while !matches!(stdin.read(&mut sink), Ok(0) | Err(_)) {}
            std::process::exit(0);
        });
    }
    let cfg = server::ServeConfig {
        bind,
        token: token.clone(),
        max_sessions: a.max_sessions,
        max_duration: Duration::from_secs(a.max_duration),
        idle_timeout: Duration::from_secs(a.idle_timeout),
        log: !a.quiet,
        ..Default::default()
    };
    let srv = server::Server::bind(cfg)
        .map_err(|e| Error::runtime(format!("cannot listen on {bind}: {e}")))?;
    let addr = srv.local_addr().map_err(Error::runtime)?;
    // The parent reads this line to learn the port.
    println!("osmeter serve listening on {addr}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if !a.quiet {
        eprintln!(
            "osmeter serve: listening on {addr} (protocol {}, {}; up to {} sessions, tests up to {} s, idle timeout {} s)",
            protocol::VERSION,
            if token.is_some() { "token required" } else { "no token" },
            a.max_sessions,
            a.max_duration,
            a.idle_timeout
        );
    }
    srv.serve();
    Ok(())
}
