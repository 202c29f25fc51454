//! The `blis` command line: glue between clap, the run file and the library.

fn main() {
    eprintln!("blis: not yet wired");
    std::process::exit(2);
}
