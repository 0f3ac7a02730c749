//! `softmlx5 PROGRAM [ARGS...]`: runs a program on the software ConnectX (its libraries first on
//! `LD_LIBRARY_PATH`); `softmlx5 --library-dir` prints where they are.
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: softmlx5 PROGRAM [ARGS...] | softmlx5 --library-dir");
        return ExitCode::from(2);
    };
    if program == "--library-dir" {
        println!("{}", softmlx5::library_dir().display());
        return ExitCode::SUCCESS;
    }
    let error = softmlx5::command(&program).args(args).exec();
    eprintln!("softmlx5: {}: {error}", program.to_string_lossy());
    ExitCode::from(127)
}
