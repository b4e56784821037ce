//! What the unit tests of the subcommands share.

use clap::{Args, Command, FromArgMatches};

/// Parses `args` as clap parses the arguments of the subcommand `name`.
pub fn parse_args<A: Args + FromArgMatches>(
    name: &'static str,
    args: &[&str],
) -> Result<A, clap::Error> {
    let matches = A::augment_args(Command::new(name))
        .try_get_matches_from(std::iter::once(name).chain(args.iter().copied()))?;
    A::from_arg_matches(&matches)
}
