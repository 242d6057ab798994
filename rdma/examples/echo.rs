//! A tokio echo server over RDMA streams, and concurrent clients that check
//! what comes back. `echo server ADDR:PORT` serves until killed;
//! `echo client ADDR:PORT [CLIENTS]` runs CLIENTS (default 8) at once.
use rdma::stream::{RdmaListener, RdmaStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(role), Some(addr)) = (args.get(1), args.get(2)) else {
        return Err("usage: echo server|client ADDR:PORT [CLIENTS]".into());
    };
    let addr = addr.parse()?;
    if role == "server" {
        let mut listener = RdmaListener::bind(addr)?;
        loop {
            let (stream, peer) = listener.accept().await?;
            tokio::spawn(async move {
                // Everything read is written back; EOF closes our side too.
                let (mut rd, mut wr) = stream.into_split();
                let n = tokio::io::copy(&mut rd, &mut wr).await?;
                println!("{peer}: echoed {n} bytes");
                wr.shutdown().await
            });
        }
    }
    let clients: usize = args.get(3).map_or(Ok(8), |n| n.parse())?;
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            tokio::spawn(async move {
                let stream = RdmaStream::connect(addr).await?;
                let msg = format!("client {i} says hello. ").repeat(10_000);
                // Write and read at once: the echo comes back while we write.
                let (mut rd, mut wr) = stream.into_split();
                let reader = tokio::spawn(async move {
                    let mut echo = Vec::new();
                    rd.read_to_end(&mut echo).await.map(|_| echo)
                });
                wr.write_all(msg.as_bytes()).await?;
                wr.shutdown().await?;
                match reader.await?? == msg.as_bytes() {
                    true => Ok::<usize, Error>(msg.len()),
                    false => Err(format!("client {i}: the echo differs").into()),
                }
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        println!("client {i}: {} bytes echoed and checked", task.await??);
    }
    Ok(())
}
