"""A study: its file loaded and checked (loading), its grid of configurations (grid), the
prompts its workload sends (prompts, prompt_sets), what it takes from the package index
(offline), what the pipeline provisions for it, one target each (targets), and the manifests of
what was provisioned (manifests).

The names below are the study's face for the rules and the command line: ``from specsweep
import study`` then ``study.load_study(path)``, ``study.expand_grid(config)``.
"""

from specsweep.spec import EMBEDDED, LaunchSpec, Section
from specsweep.study.grid import cell_major, expand_grid, find_spec, make_spec
from specsweep.study.loading import (
                                     check_local_paths,
                                     load_study,
                                     model_path_problem,
                                     provisioned,
                                     schema_path,
                                     shown_command,
                                     validate_study,
)

__all__ = ["EMBEDDED", "LaunchSpec", "Section", "cell_major", "check_local_paths", "expand_grid", "find_spec",
           "load_study", "make_spec", "model_path_problem", "provisioned", "schema_path", "shown_command",
           "validate_study"]
