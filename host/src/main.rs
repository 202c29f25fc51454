//! The `blis` command line: glue between clap and the library. Prints the
//! report (and only the report) on stdout, one error paragraph on stderr.

use blis_host::alloc::HugePageAlloc;
use blis_host::cli::{self, Cli};

#[global_allocator]
static ALLOCATOR: HugePageAlloc = HugePageAlloc;

fn main() {
    blis_host::alloc::init();
    // Before any thread: an interrupt removes the temporary outputs.
    blis_host::output::install_interrupt_cleanup();
    let cli: Cli = cli::parse();
    match cli::dispatch(cli) {
        Ok(Some(text)) => {
            if let Err(e) = cli::print_stdout(&text) {
                eprintln!("error: cannot write to stdout: {e}");
                std::process::exit(1);
            }
        }
        Ok(None) => {}
        Err(f) => {
            eprintln!("error: {}", f.message);
            std::process::exit(cli::exit_code(&f));
        }
    }
}
