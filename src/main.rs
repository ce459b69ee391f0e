//! The `enginebench` binary: the command line, with no Python linked in (the
//! engine runs in a worker process of the chosen interpreter; see `python`).

fn main() {
    std::process::exit(enginebench::app::main(std::env::args_os()));
}
