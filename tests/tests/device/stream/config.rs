//! `StreamConfig`: two ends of unequal buffers move data both ways, and
//! a peer whose connection private data is not a stream's is refused with
//! a typed error, on accept and on connect.

use std::io;
use std::net::{IpAddr, SocketAddr};

use rdma::cm::{AsyncCm, ConnParam};
use rdma::stream::{
    MessageEndpoint, MessageListener, RdmaListener, RdmaStream, StreamConfig, StreamConfigError,
};
use rdma_tests::{check, Outcome, Provider, TestEnv, TestResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{pattern, run, verify, R, T};

fn config(recv: usize, send: usize, size: usize) -> R<StreamConfig> {
    Ok(StreamConfig::new()
        .with_recv_buffers(recv)?
        .with_send_buffers(send)?
        .with_buffer_size(size)?)
}

/// Writes `len` bytes of the stream `seed` to `s` while reading `len`
/// bytes of the stream `seed ^ 1` from it, in pieces of odd sizes;
/// checks what it read byte for byte.
async fn both_ways(s: RdmaStream, seed: u64, len: usize) -> R<()> {
    let (mut rd, mut wr) = s.into_split();
    let out = pattern(seed, len);
    let write = async move {
        for piece in out.chunks(7919) {
            wr.write_all(piece).await?;
        }
        wr.shutdown().await?;
        Ok::<_, io::Error>(())
    };
    let read = async move {
        let (mut got, mut scratch, mut buf) = (0usize, Vec::new(), vec![0u8; 5003]);
        loop {
            let n = rd.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            verify(seed ^ 1, got as u64, &buf[..n], &mut scratch).map_err(io::Error::other)?;
            got += n;
        }
        Ok::<_, io::Error>(got)
    };
    let (w, r) = tokio::join!(write, read);
    w?;
    let got = r?;
    if got != len {
        return Err(format!("read {got} bytes of {len}").into());
    }
    Ok(())
}

/// Each pair: the listener's configuration, the connector's, bytes each
/// way. A side of 2 receive buffers gives its peer 2 credits (one data
/// message in flight), and a side of 64-byte buffers limits both sides'
/// messages to 56 bytes of data.
pub fn streams_of_unequal_configs_move_data_both_ways(env: &TestEnv) -> TestResult {
    run(async {
        let pairs = [
            (config(2, 1, 64)?, StreamConfig::new(), 24 << 10),
            (StreamConfig::new(), config(2, 1, 64)?, 24 << 10),
            (config(3, 2, 4096)?, config(32, 8, 256 << 10)?, 1 << 20),
            (config(32, 8, 256 << 10)?, config(2, 2, 1024)?, 256 << 10),
        ];
        for (i, (server, client, len)) in pairs.into_iter().enumerate() {
            let mut l = RdmaListener::bind_with(SocketAddr::new(IpAddr::V4(env.ipv4), 0), server)?;
            let at = l.local_addr()?;
            let (a, c) = tokio::join!(l.accept(), RdmaStream::connect_with(at, &client));
            let (a, c) = (a?.0, c?);
            let seed = 0x5eed_0000 + i as u64 * 2;
            // The server writes stream seed+1 and reads seed; the client
            // the other way round.
            let (s, c) = tokio::join!(both_ways(a, seed + 1, len), both_ways(c, seed, len));
            s.map_err(|e| format!("pair {i} ({server:?} / {client:?}), server: {e}"))?;
            c.map_err(|e| format!("pair {i} ({server:?} / {client:?}), client: {e}"))?;
        }
        // Messages: the largest is the smaller side's buffer less the
        // header, both ways; one byte more is refused before it is sent.
        let small = config(2, 1, 256)?;
        let mut l = MessageListener::bind_with(SocketAddr::new(IpAddr::V4(env.ipv4), 0), small)?;
        let at = l.local_addr()?;
        let (a, c) = tokio::join!(l.accept(), MessageEndpoint::connect(at));
        let (a, c) = (a?.0, c?);
        check!(
            a.max_message() == 248 && c.max_message() == 248,
            "max_message {} and {}, not 248",
            a.max_message(),
            c.max_message()
        );
        let e = c
            .send(&[0; 249])
            .await
            .expect_err("a 249-byte message was sent");
        check!(e.kind() == io::ErrorKind::InvalidInput, "{e}");
        for (from, to, seed) in [(&c, &a, 11u64), (&a, &c, 12)] {
            for len in [0usize, 1, 248] {
                let m = pattern(seed + len as u64, len);
                from.send(&m).await?;
                let got = to.recv().await?.ok_or("no message")?;
                check!(got[..] == m[..], "a message of {len} bytes arrived changed");
            }
        }
        Ok(())
    })
}

/// The stream's set-up error inside `e`, if any.
fn config_error(e: &io::Error) -> Option<&StreamConfigError> {
    e.get_ref()?.downcast_ref::<StreamConfigError>()
}

/// Junk private data in a connect or accept, and what the other side
/// makes of it on `provider`: the IB CM (rxe) pads private data with
/// zeros to its message's size (56 bytes for a request, 196 for an
/// accept), iWARP (siw) delivers it as sent.
fn junk(provider: Provider) -> Vec<(&'static str, Vec<u8>, StreamConfigError)> {
    let padded = provider == Provider::Rxe;
    let mut version = b"RDMS\x07\0\0\0".to_vec();
    version.extend_from_slice(&[16, 0, 0, 0, 0, 0, 1, 0]);
    let mut params = b"RDMS\x01\0\0\0".to_vec();
    params.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 0]);
    vec![
        (
            "no private data",
            Vec::new(),
            if padded {
                StreamConfigError::PeerNotStream
            } else {
                StreamConfigError::PeerTooShort { len: 0 }
            },
        ),
        (
            "the mark alone",
            b"RDMS".to_vec(),
            if padded {
                StreamConfigError::PeerVersion { version: 0 }
            } else {
                StreamConfigError::PeerTooShort { len: 4 }
            },
        ),
        (
            "another program's",
            vec![0xa5; 40],
            StreamConfigError::PeerNotStream,
        ),
        (
            "another version",
            version,
            StreamConfigError::PeerVersion { version: 7 },
        ),
        (
            "zero receive buffers",
            params,
            StreamConfigError::PeerParams {
                recv_buffers: 0,
                buffer_size: 65536,
            },
        ),
    ]
}

/// A raw CM client connects to a stream listener with private data that
/// is not a stream's: the listener rejects it (the client's connect
/// fails) and `accept` returns `InvalidData` with the typed error; the
/// listener then still accepts a stream.
pub fn a_request_with_foreign_private_data_is_refused_on_accept(env: &TestEnv) -> TestResult {
    run(async {
        let mut l = RdmaListener::bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
        let at = l.local_addr()?;
        let cm = AsyncCm::new()?;
        for (what, data, want) in junk(env.provider) {
            let param = ConnParam::new().with_private_data(&data);
            let connect = cm.connect(at, T, &param, crate::cm_async::setup);
            let (accepted, connected) = tokio::join!(l.accept(), connect);
            check!(connected.is_err(), "{what}: the raw connect was accepted");
            let e = match accepted {
                Ok(_) => return Err(format!("{what}: a stream was accepted").into()),
                Err(e) => e,
            };
            check!(e.kind() == io::ErrorKind::InvalidData, "{what}: {e}");
            let got = config_error(&e).ok_or_else(|| format!("{what}: untyped: {e}"))?;
            check!(*got == want, "{what}: {got:?}, not {want:?}");
        }
        let (a, c) = tokio::join!(l.accept(), RdmaStream::connect(at));
        let (mut a, mut c) = (a?.0, c?);
        c.write_all(b"after the junk").await?;
        c.shutdown().await?;
        let mut got = Vec::new();
        a.read_to_end(&mut got).await?;
        check!(got == b"after the junk", "{got:?}");
        Ok(())
    })
}

/// A raw CM listener accepts a stream's connect with junk private data:
/// `connect` fails with `InvalidData` and the typed error.
pub fn an_accept_with_foreign_private_data_fails_the_connect(env: &TestEnv) -> TestResult {
    run(async {
        let cm = AsyncCm::new()?;
        let mut listener = cm.listen(SocketAddr::new(IpAddr::V4(env.ipv4), 0), 8)?;
        let at = listener.local_addr().ok_or("the listener has no address")?;
        for (what, data, want) in junk(env.provider) {
            let server = async {
                let mut req = listener.accept().await?;
                let conn = crate::cm_async::setup(req.id_mut())?;
                let param = ConnParam::new().with_private_data(&data);
                let (id, _) = req.accept(&param, T).await?;
                Ok::<_, rdma::Error>((id, conn))
            };
            let (served, connected) = tokio::join!(server, RdmaStream::connect(at));
            let _kept = served?;
            let e = match connected {
                Ok(_) => return Err(format!("{what}: the stream connected").into()),
                Err(e) => e,
            };
            check!(e.kind() == io::ErrorKind::InvalidData, "{what}: {e}");
            let got = config_error(&e).ok_or_else(|| format!("{what}: untyped: {e}"))?;
            check!(*got == want, "{what}: {got:?}, not {want:?}");
        }
        Ok(())
    })
}

/// A configuration whose buffers exceed the port's `max_msg_sz` (rxe: 8
/// MiB) fails before anything is made: `connect_with` with `InvalidInput`
/// carrying `DeviceLimit`, and a listener of it refuses each request
/// (the requester's connect fails, `accept` returns the error). siw's
/// `max_msg_sz` is above the largest buffer a configuration takes.
pub fn buffers_beyond_the_devices_max_msg_sz_are_refused(env: &TestEnv) -> TestResult {
    let ctx = crate::fixtures::open(env).map_err(|e| e.to_string())?;
    let max = ctx.query_port(1)?.max_msg_sz() as usize;
    drop(ctx);
    if max >= rdma::stream::MAX_BUFFER_SIZE {
        return Ok(Outcome::Skipped(format!(
            "{}'s max_msg_sz ({max:#x}) is above the largest stream buffer",
            env.provider.name()
        )));
    }
    let size = (max + 8) & !7;
    run(async move {
        let big = config(2, 1, size)?;
        let want = |e: &io::Error, what: &str| -> R<()> {
            check!(e.kind() == io::ErrorKind::InvalidInput, "{what}: {e}");
            match config_error(e) {
                Some(StreamConfigError::DeviceLimit {
                    what: "max_msg_sz",
                    need,
                    max: m,
                }) if *need == size as u64 && *m == max as u64 => Ok(()),
                other => Err(format!("{what}: {other:?} ({e})").into()),
            }
        };
        let mut l = RdmaListener::bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
        let at = l.local_addr()?;
        let e = match RdmaStream::connect_with(at, &big).await {
            Ok(_) => return Err("a connect with too large buffers succeeded".into()),
            Err(e) => e,
        };
        want(&e, "connect_with")?;
        let mut big_l = RdmaListener::bind_with(SocketAddr::new(IpAddr::V4(env.ipv4), 0), big)?;
        let big_at = big_l.local_addr()?;
        let (a, c) = tokio::join!(big_l.accept(), RdmaStream::connect(big_at));
        check!(
            c.is_err(),
            "a connect to a listener of too large buffers succeeded"
        );
        match a {
            Ok(_) => return Err("the listener of too large buffers accepted".into()),
            Err(e) => want(&e, "accept")?,
        }
        // The first listener saw nothing of the refused connect: its next
        // stream is the next request.
        let (a, c) = tokio::join!(l.accept(), RdmaStream::connect(at));
        let (mut a, mut c) = (a?.0, c?);
        c.write_all(b"ok").await?;
        c.shutdown().await?;
        let mut got = Vec::new();
        a.read_to_end(&mut got).await?;
        check!(got == b"ok", "{got:?}");
        Ok(())
    })
}

rdma_tests::tests!(
    "stream":
    streams_of_unequal_configs_move_data_both_ways,
    a_request_with_foreign_private_data_is_refused_on_accept,
    an_accept_with_foreign_private_data_fails_the_connect,
    buffers_beyond_the_devices_max_msg_sz_are_refused,
);
