//! grpc-go's error texts (dial failures, status codes), so kcsi's messages read as the
//! kubelet's and driver authors can grep for them.

use std::path::Path;

use tonic::{Code, Status};

/// grpc-go's dial failure text, which names the OS cause as Go does
/// (`dial unix /x.sock: connect: no such file or directory`).
pub(crate) fn dial_error(path: &Path, err: &std::io::Error) -> String {
    let cause = match err.raw_os_error() {
        Some(errno) => go_errno_text(errno),
        None => err.to_string(),
    };
    format!("dial unix {}: connect: {cause}", path.display())
}

/// The C library's text for `errno` in Go's spelling: lower case, no "(os error N)".
fn go_errno_text(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    let text = text
        .strip_suffix(&format!(" (os error {errno})"))
        .unwrap_or(&text);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The status code's name as grpc-go's `codes.Code.String()` spells it.
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// Go gRPC's error text, which driver authors grep for: `rpc error: code = X desc = Y`.
pub(crate) fn go_status_text(status: &Status) -> String {
    format!(
        "rpc error: code = {} desc = {}",
        code_name(status.code()),
        status.message()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dial_errors_name_the_os_cause_as_go_does() {
        let cases = [
            (libc::ENOENT, "no such file or directory"),
            (libc::ECONNREFUSED, "connection refused"),
            (libc::EACCES, "permission denied"),
        ];
        for (errno, text) in cases {
            let err = std::io::Error::from_raw_os_error(errno);
            assert_eq!(
                dial_error(Path::new("/run/d.sock"), &err),
                format!("dial unix /run/d.sock: connect: {text}")
            );
        }
    }

    #[test]
    fn code_names_are_grpc_go_spellings() {
        assert_eq!(code_name(Code::Cancelled), "Canceled");
        assert_eq!(code_name(Code::Ok), "OK");
        assert_eq!(code_name(Code::NotFound), "NotFound");
    }
}
