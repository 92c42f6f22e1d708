"""Tools to use on the engine: gradcheck, the graph as text or a picture, trace (a profiler), checkpoints.

    gradcheck.py      float64 central differences against backward
    viz.py            print_graph, draw_graph
    trace.py          minigrad.trace(): every op's forward and backward time
    serialization.py  save / load (.npz, never pickle)
"""
