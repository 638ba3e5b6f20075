// shardtrain: fine-tune BERT sequence classifiers on clusters. See README.md.
#include "shardtrain/cli/app.h"

int main(int argc, char** argv) { return shardtrain::run_cli(argc, argv); }
