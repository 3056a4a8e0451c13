"""A small English text the demo's jobs train on (byte-level tokens), so their loss visibly falls.

Written for Tessera; any local text file works the same way (the job spec's ``data`` field).
"""

CORPUS = """\
A training job rarely needs to say where it runs. It needs a model, a batch, an amount of work and perhaps a
deadline. The cluster knows the rest: which machines are idle, which cards have enough memory, which links are
fast and which are slow. When a user must choose the number of accelerators by hand, the choice is made once,
at the worst moment, with the least information, and then it is never revisited.

Heterogeneous clusters make the hand choice harder still. An old card may hold the model only when the work is
cut into more pieces; a new card may finish the same work in half the time but be busy until tonight. A mix of
both may beat either alone, if the faster cards take the larger share of every batch. The question is not
which card is best, but which arrangement of the cards that are free now finishes the queue soonest.

So the scheduler looks at every job as a handful of candidate cells. A cell is a fixed set of cards and a fixed
number of pipeline stages; inside it, the split between data parallel and tensor parallel work is left open.
Each cell gets an estimate of its iteration time from a cheap model of compute and communication, checked
against what the runtime measures. The scheduler then compares cells across jobs, admits the jobs that fit,
and gives the cards freed by a finished job to the running jobs that gain the most from them.

Rescaling a job is not free. The job writes a checkpoint, its workers stop, new workers start on the new cards
with a new plan, and the checkpoint is read back and cut into the pieces the new plan wants. Every step of that
is measured, and a job is only moved when the time it saves is larger than the time the move costs. A worker
that dies is treated the same way: the job goes back to its last checkpoint, waits a little, and starts again,
a bounded number of times, so that one broken machine cannot keep a job restarting forever.

The plan inside a cell is balanced to the devices. Faster cards get more samples per step; stages on cards
with more memory hold more layers; the slowest stage sets the pace, so the layers are moved until the stages
take about the same time. None of this is visible to the user, who submitted a model and a batch and now
watches the loss fall, the throughput rise, and the queue drain, one finished job after another.

Good tools explain themselves. A pending job says why it waits: the cards it needs are busy, a job ahead of it
has priority, or nothing in this cluster can hold it at all. A running job says which cards it holds, which
plan it runs, what that plan was expected to cost and what it really costs. A failed job says which worker
failed, at which step, and what it will do next. Nothing that was accepted is ever lost, even when the server
itself is stopped in the middle of the night and started again in the morning.
"""
