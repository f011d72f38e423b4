//! `wallcrawler-controller`: parse the command line, run the chosen mode, exit with its status.

use clap::Parser;
use wallcrawler_controller::{cli, config};

fn main() {
    let parsed = match config::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                config::EXIT_CONFIG
            } else {
                0
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    std::process::exit(cli::main_with(parsed));
}
