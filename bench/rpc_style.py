"""Compares the CPU cost of one 128 KiB request/response: raw framed asyncio stream vs httpx against uvicorn.

    python bench/rpc_style.py
"""
import asyncio, time, os, sys, struct, orjson, httpx, uvloop
N=3000
PAY=b"x"*131072
async def raw_server(reader, writer):
    try:
        while True:
            hdr = await reader.readexactly(8)
            hl, pl = struct.unpack(">II", hdr)
            h = orjson.loads(await reader.readexactly(hl)); 
            if pl: await reader.readexactly(pl)
            out = orjson.dumps({"ok":1})
            writer.write(struct.pack(">II", len(out), len(PAY)) + out); writer.write(PAY)
    except asyncio.IncompleteReadError: pass
async def asgi(scope, receive, send):
    if scope["type"]!="http": return
    await send({"type":"http.response.start","status":200,"headers":[]}); await send({"type":"http.response.body","body":PAY})
async def main():
    srv = await asyncio.start_server(raw_server, "127.0.0.1", 7801)
    r,w = await asyncio.open_connection("127.0.0.1", 7801)
    t=time.process_time()
    for i in range(N):
        h=orjson.dumps({"op":"get","id":i}); w.write(struct.pack(">II",len(h),0)+h)
        hh=await r.readexactly(8); hl,pl=struct.unpack(">II",hh); orjson.loads(await r.readexactly(hl)); await r.readexactly(pl)
    print("raw stream rtt cpu (both sides, one process) us/op", (time.process_time()-t)/N*1e6)
    import uvicorn
    cfg=uvicorn.Config(asgi, host="127.0.0.1", port=7802, log_level="error", http="httptools", loop="uvloop")
    s=uvicorn.Server(cfg); task=asyncio.create_task(s.serve()); await asyncio.sleep(0.5)
    async with httpx.AsyncClient() as c:
        await c.get("http://127.0.0.1:7802/")
        t=time.process_time()
        for i in range(N): (await c.get("http://127.0.0.1:7802/")).content
        print("httpx+uvicorn rtt cpu (both sides) us/op", (time.process_time()-t)/N*1e6)
    s.should_exit=True; await task
uvloop.run(main())
