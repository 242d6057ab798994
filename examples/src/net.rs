//! Host names and addresses on the command line.

use std::net::{SocketAddr, ToSocketAddrs};

/// The first address of `host` (a name or an IP address) with `port`; the
/// error names the host and says why.
pub fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host:?}: {e} - invalid hostname or IP address"))?
        .next()
        .ok_or_else(|| format!("{host:?} has no address"))
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn resolves_literal_addresses() {
        assert_eq!(
            resolve("192.0.2.1", 7).unwrap(),
            "192.0.2.1:7".parse().unwrap()
        );
        assert_eq!(
            resolve("fd00::1", 0).unwrap(),
            "[fd00::1]:0".parse().unwrap()
        );
    }

    #[test]
    fn bad_host_is_an_error_naming_it() {
        let e = resolve("no such host..invalid", 1).unwrap_err();
        assert!(e.contains("no such host..invalid"), "{e}");
    }
}
