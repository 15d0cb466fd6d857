"""``python -m boost.planning.perf_model``: the reference paper's step-time table, predicted beside reported."""

from boost.planning.perf_model.reference_table import print_paper_table

if __name__ == "__main__":  # pytest --doctest-modules imports this file too
    print_paper_table()
