//! Reading the host's kubeconfig file (or parsing the document a host config carries). kcsi reads and decodes the bytes itself rather than use
//! kube's `Kubeconfig::read_from`, which panics on a UTF-16 file of odd length and blocks on a
//! FIFO; hostile files become INVALID_ARGUMENT errors that name the path.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use ::kube::config::Kubeconfig;

use crate::error::{Error, Result};

/// Far above any real kubeconfig (embedded certificates take a few KiB), far below memory
/// trouble.
const MAX_KUBECONFIG_BYTES: u64 = 4 << 20;

/// Reads, decodes and parses the kubeconfig at `path`; relative file references in it
/// (certificate, key, token file, exec command with a `/`) are made absolute against its
/// directory, as client-go's loader does.
pub fn read(path: &Path) -> Result<Kubeconfig> {
    let what = format!("kubeconfig {}", path.display());
    // Non-blocking, so opening a FIFO cannot hang; the type is checked on the open file.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| open_error(&what, &e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("cannot read {what}"), &e))?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(Error::invalid(format!("cannot read {what}: it is {kind}")));
    }
    let mut bytes = Vec::new();
    file.take(MAX_KUBECONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(format!("cannot read {what}"), &e))?;
    if bytes.len() as u64 > MAX_KUBECONFIG_BYTES {
        return Err(Error::invalid(format!(
            "cannot read {what}: it is larger than {} MiB",
            MAX_KUBECONFIG_BYTES >> 20
        )));
    }
    let text =
        decode(&bytes).map_err(|why| Error::invalid(format!("cannot read {what}: {why}")))?;
    let mut config = parse(&what, &text)?;
    if let Some(dir) = path.parent() {
        absolutize(&mut config, dir);
    }
    Ok(config)
}

/// Parses a kubeconfig document (YAML or JSON) that `what` names in errors. JSON, which the
/// Go binding hands over for its relay, is read as JSON: the YAML parser (a tenth of the
/// code a kubelet runs in kcsi) then never runs there, and stays out of its resident memory.
/// A document that is YAML after all (a flow mapping is not always JSON) is read as YAML.
pub fn parse(what: &str, text: &str) -> Result<Kubeconfig> {
    if text.trim_start().starts_with('{') {
        if let Ok(config) = serde_json::from_str::<Kubeconfig>(text) {
            return Kubeconfig::default()
                .merge(config)
                .map_err(|e| Error::invalid(format!("cannot parse {what}: {}", redacted(&e))));
        }
    }
    Kubeconfig::from_yaml(text)
        .map_err(|e| Error::invalid(format!("cannot parse {what}: {}", redacted(&e))))
}

fn open_error(what: &str, e: &std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::invalid(format!("cannot read {what}: {e}")),
        _ => Error::io(format!("cannot read {what}"), e),
    }
}

/// UTF-8 (with or without BOM) or, with a BOM, UTF-16 of either byte order: the encodings
/// client-go and kube accept.
fn decode(bytes: &[u8]) -> std::result::Result<String, String> {
    let utf16 = |rest: &[u8], order: &str, word: fn([u8; 2]) -> u16| {
        if !rest.len().is_multiple_of(2) {
            return Err(format!("it starts with a UTF-16 {order} byte-order mark but has an odd number of bytes ({})", rest.len() + 2));
        }
        let units: Vec<u16> = rest.chunks_exact(2).map(|c| word([c[0], c[1]])).collect();
        String::from_utf16(&units).map_err(|_| format!("it is not valid UTF-16 {order}"))
    };
    match bytes {
        [0xFF, 0xFE, rest @ ..] => utf16(rest, "LE", u16::from_le_bytes),
        [0xFE, 0xFF, rest @ ..] => utf16(rest, "BE", u16::from_be_bytes),
        [0xEF, 0xBB, 0xBF, rest @ ..] => utf8(rest, 3),
        _ => utf8(bytes, 0),
    }
}

fn utf8(bytes: &[u8], offset: usize) -> std::result::Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|e| {
        format!(
            "it is neither UTF-8 nor UTF-16 with a byte-order mark (invalid UTF-8 at byte {})",
            offset + e.utf8_error().valid_up_to()
        )
    })
}

/// Where the parse failed, never what was there: the parser's messages quote the document
/// (a token, a key).
fn redacted(e: &::kube::config::KubeconfigError) -> String {
    let location = match e {
        ::kube::config::KubeconfigError::Parse(e) => e.location(),
        _ => None,
    };
    match location {
        Some(l) => format!(
            "not a valid kubeconfig (YAML error at line {} column {})",
            l.line(),
            l.column()
        ),
        None => "not a valid kubeconfig".to_string(),
    }
}

fn absolutize(config: &mut Kubeconfig, dir: &Path) {
    let abs = |p: &mut Option<String>| {
        if let Some(rel) = p.as_deref().filter(|s| Path::new(s).is_relative()) {
            if let Some(joined) = dir.join(rel).to_str() {
                *p = Some(joined.to_string());
            }
        }
    };
    for cluster in config
        .clusters
        .iter_mut()
        .filter_map(|c| c.cluster.as_mut())
    {
        abs(&mut cluster.certificate_authority);
    }
    for auth in config
        .auth_infos
        .iter_mut()
        .filter_map(|a| a.auth_info.as_mut())
    {
        abs(&mut auth.client_certificate);
        abs(&mut auth.client_key);
        abs(&mut auth.token_file);
        if let Some(exec) = auth.exec.as_mut() {
            // A bare name is looked up in PATH; only a relative path is resolved.
            if exec.command.as_deref().is_some_and(|c| c.contains('/')) {
                abs(&mut exec.command);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the Go binding's relay hands over (relay.go), with a token.
    const RELAY_JSON: &str = r#"{"apiVersion":"v1","kind":"Config",
        "clusters":[{"name":"host","cluster":{"server":"http://127.0.0.1:40000"}}],
        "users":[{"name":"relay","user":{"token":"s3cret"}}],
        "contexts":[{"name":"host","context":{"cluster":"host","user":"relay"}}],
        "current-context":"host"}"#;

    fn as_value(config: &Kubeconfig) -> serde_json::Value {
        serde_json::to_value(config).expect("a kubeconfig serialises")
    }

    #[test]
    fn a_json_kubeconfig_reads_as_kubes_yaml_reader_reads_it() {
        let ours = parse("relay", RELAY_JSON).expect("the relay's kubeconfig parses");
        let kubes = Kubeconfig::from_yaml(RELAY_JSON).expect("kube reads JSON as YAML");
        assert_eq!(as_value(&ours), as_value(&kubes));
        assert_eq!(
            ours.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("http://127.0.0.1:40000")
        );
        assert_eq!(ours.current_context.as_deref(), Some("host"));
    }

    #[test]
    fn a_yaml_flow_mapping_that_is_not_json_still_reads_as_yaml() {
        let config = parse(
            "flow",
            "{apiVersion: v1, kind: Config, current-context: host}",
        )
        .expect("a YAML flow mapping parses");
        assert_eq!(config.current_context.as_deref(), Some("host"));
    }

    #[test]
    fn a_broken_json_kubeconfig_is_invalid_and_its_secrets_stay_out_of_the_message() {
        let e = parse(
            "relay",
            r#"{"users":[{"name":"u","user":{"token":["s3cret"]}}]}"#,
        )
        .expect_err("a token that is a list is refused");
        assert_eq!(e.kind(), crate::error::ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("cannot parse relay"), "{e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }
}
