//! The `osmeter` binary: the command layer (osmeter::commands) does the parsing, the
//! dispatch and the exit codes (0 success, 1 the work failed, 2 bad usage).

fn main() -> std::process::ExitCode {
    osmeter::commands::main()
}
