"""What becomes of an attempt once it left: publish outcomes recorded (`recorder`), results and
time-outs applied (`results`; `deadlines` for this node's attempts, `expiry` for a dead node's),
and delayq's own outages kept from using up consumers' time-to-run (`outages`)."""
